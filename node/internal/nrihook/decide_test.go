package nrihook

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

const node = "n1"

// agentRule: the account "dcgm" in namespace "agents" is a GPU agent;
// namespace "unread" cannot be told yet.
func agentRule(ns, account string) (bool, error) {
	if ns == "unread" {
		return false, errors.New("not in yet")
	}
	return ns == "agents" && account == "dcgm", nil
}

func rules() Ruleset {
	return Ruleset{Node: node, Resources: wellknown.DefaultResourceNames(), Agent: agentRule, Early: func(ns string) bool { return ns == "kube-system" }}
}

// gpuPod is a pod with one app container asking one GPU and a sidecar
// asking none; assigned, when uuid is not "", that GPU with 1000 MiB.
func gpuPod(name, uuid string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(1, resource.DecimalSI)}}},
			{Name: "sidecar"},
		}},
	}
	if uuid != "" {
		raw, err := protocol.EncodeAssignment(protocol.Assignment{Version: protocol.Version, Node: node, Containers: []protocol.ContainerAssignment{
			{Name: "app", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: 1000, Cores: 30}}},
		}})
		if err != nil {
			panic(err)
		}
		p.Annotations[wellknown.AnnotationAssignment] = raw
	}
	return p
}

func containerOf(p *corev1.Pod, name string) NamedContainer {
	return NamedContainer{Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), Name: name, Known: p}
}

func TestDecide(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	attacker := gpuPod("attacker", "")
	plain := gpuPod("plain", "")
	plain.Spec.Containers = plain.Spec.Containers[1:]
	priv := gpuPod("priv", "")
	priv.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
	elsewhere := gpuPod("elsewhere", "GPU-0")
	elsewhere.Spec.NodeName = "n2"
	hami := gpuPod("hami", "")
	hami.Annotations[hamirecord.AnnotationHAMiAllocated] = "GPU-0,NVIDIA,1000,30:;"
	hami.Annotations[hamirecord.AnnotationHAMiNode] = node
	hamiRenamed := hami.DeepCopy()
	hamiRenamed.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"hami.example/gpu": *resource.NewQuantity(1, resource.DecimalSI)}
	cluster := gpuPod("cni", "")
	cluster.Namespace = "kube-system"
	cluster.Spec.Containers = cluster.Spec.Containers[1:]
	agent := gpuPod("dcgm", "")
	agent.Namespace, agent.Spec.ServiceAccountName = "agents", "dcgm"
	agentOtherAccount := agent.DeepCopy()
	agentOtherAccount.Spec.ServiceAccountName = "default"
	agentElsewhere := agent.DeepCopy()
	agentElsewhere.Namespace = "gpu-operator"
	agentUnread := agent.DeepCopy()
	agentUnread.Namespace = "unread"
	privUnread := agentUnread.DeepCopy()
	privUnread.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
	assignedAgent := gpuPod("dcgm2", "GPU-0")
	assignedAgent.Namespace, assignedAgent.Spec.ServiceAccountName = "agents", "dcgm"
	hamiElsewhere := hami.DeepCopy()
	hamiElsewhere.Annotations[hamirecord.AnnotationHAMiNode] = "n2"
	for _, tc := range []struct {
		name string
		c    NamedContainer
		want Action
		why  string // in the reason
	}{
		{"assigned container gets its slice", containerOf(victim, "app"), Grant, ""},
		{"its sidecar gets no GPU", containerOf(victim, "sidecar"), Void, ""},
		{"asking without an assignment is refused", containerOf(attacker, "app"), Refuse, "assigned it no GPUs"},
		{"a pod without GPUs gets none", containerOf(plain, "sidecar"), Void, ""},
		{"privileged keeps its devices", containerOf(priv, "sidecar"), Exempt, "privileged"},
		{"a recreated pod under the name is not its predecessor", NamedContainer{Namespace: "t", Pod: "victim", UID: "uid-other", Name: "app", Known: victim}, Refuse, "has not seen pod t/victim"},
		{"an unknown pod is refused", NamedContainer{Namespace: "t", Pod: "new", UID: "u", Name: "app"}, Refuse, "kubelet retries"},
		{"an unknown static pod gets no GPU", NamedContainer{Namespace: "kube-system", Pod: "etcd", UID: "u", Name: "etcd", Static: true}, Void, ""},
		{"a GPU agent is left alone", containerOf(agent, "app"), Exempt, "GPU agent: ServiceAccount dcgm in namespace agents"},
		{"so is each of its containers", containerOf(agent, "sidecar"), Exempt, "GPU agent"},
		{"an agent's pod vgpud has not seen waits like any other", NamedContainer{Namespace: "agents", Pod: "x", UID: "u", Name: "c"}, Refuse, "has not seen pod agents/x"},
		{"another account in the agents' namespace is no agent", containerOf(agentOtherAccount, "app"), Refuse, "assigned it no GPUs"},
		{"the agent's account in another namespace is no agent", containerOf(agentElsewhere, "sidecar"), Void, ""},
		{"an agent is refused while its namespace cannot be told", containerOf(agentUnread, "sidecar"), Refuse, "cannot tell yet whether pod unread/dcgm is a GPU agent"},
		{"an agent's assignment is its slice", containerOf(assignedAgent, "app"), Grant, ""},
		{"a privileged container is exempt while agents cannot be told", containerOf(privUnread, "sidecar"), Exempt, "privileged"},
		{"an assignment for another node is refused", containerOf(elsewhere, "app"), Refuse, "not this node"},
		{"an ephemeral container gets no GPU", containerOf(victim, "debugger"), Void, ""},
		{"a pod HAMi placed here keeps what its device plugin gave it", containerOf(hami, "app"), Keep, "placed on this node by HAMi"},
		{"HAMi's record for another node is no exemption", containerOf(hamiElsewhere, "app"), Refuse, "assigned it no GPUs"},
		// Exemptions as wide as their reason, and no wider.
		{"a HAMi pod's container that asks no GPU got none from HAMi", containerOf(hami, "sidecar"), Void, ""},
		{"nor did its ephemeral container", containerOf(hami, "debugger"), Void, ""},
		{"HAMi's own resource name, not vgpud's, still got HAMi's devices", containerOf(hamiRenamed, "app"), Keep, "placed on this node by HAMi"},
		{"an early namespace's unseen pod starts with no GPU", NamedContainer{Namespace: "kube-system", Pod: "cni-x", UID: "u", Name: "cni"}, Void, ""},
		{"an early namespace's seen pod is judged like any other", containerOf(cluster, "sidecar"), Void, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.c, rules())
			if d.Action != tc.want || !strings.Contains(d.Reason, tc.why) {
				t.Fatalf("Decide = %v %q, want %v with %q", d.Action, d.Reason, tc.want, tc.why)
			}
		})
	}
}

func TestDecideGrantIsTheAssignment(t *testing.T) {
	d := Decide(containerOf(gpuPod("victim", "GPU-0"), "app"), Ruleset{Node: node, Resources: wellknown.DefaultResourceNames(), Slice: grant.Shape{Interposer: "/opt/vgpu"}})
	env := d.Slice.Env
	if env["NVIDIA_VISIBLE_DEVICES"] != "GPU-0" || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" || env["CUDA_DEVICE_SM_LIMIT"] != "30" {
		t.Fatalf("env = %v", env)
	}
	if len(d.Slice.Mounts) != 2 || d.Slice.Cache != "/usr/local/vgpu/cache" {
		t.Fatalf("mounts = %v, cache %q", d.Slice.Mounts, d.Slice.Cache)
	}
	// The hook mounts the interposer's cache as a bounded tmpfs private
	// to the container: nothing the container writes there reaches the
	// node's disk, or outlives it.
	adj, err := (&Hook{}).apply(d, &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	var cache *api.Mount
	for _, m := range adj.GetMounts() {
		if m.Destination == "/usr/local/vgpu/cache" {
			cache = m
		}
		if strings.HasPrefix(m.Source, "/opt/vgpu/containers") {
			t.Errorf("host directory %s mounted", m.Source)
		}
	}
	if cache == nil || cache.Type != "tmpfs" || !slices.Contains(cache.Options, "size="+grant.CacheSize) || !slices.Contains(cache.Options, "noexec") {
		t.Fatalf("cache mount %v", cache)
	}
	if _, err := os.Stat("/opt/vgpu/containers/uid-victim_app"); err == nil {
		t.Fatal("the hook made a host cache directory")
	}
}
