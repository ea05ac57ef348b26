package nrihook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol"
)

const claimDevice = "gpu.vgpud.io/claim=c-1-0"

// fakeClaims is a node's prepare record: one claim's device, prepared
// for the pod uid-dra.
func fakeClaims(_ context.Context, cdiName, podUID, container string) (ClaimGrant, bool, error) {
	if !strings.HasPrefix(cdiName, "gpu.vgpud.io/claim=") {
		return ClaimGrant{}, false, nil
	}
	if podUID != "uid-dra" && podUID != "uid-two" {
		return ClaimGrant{}, true, errors.New("this node prepared no such claim for this pod")
	}
	switch cdiName {
	case claimDevice:
		return ClaimGrant{CDI: cdiName, Share: true, Nodes: []string{"/dev/nvidia3", "/dev/nvidiactl"}, Slice: protocol.GPUSlice{UUID: "GPU-3", MemoryMiB: 10240, Cores: 30}}, true, nil
	case "gpu.vgpud.io/claim=c-2-0":
		return ClaimGrant{CDI: cdiName, Share: true, Nodes: []string{"/dev/nvidia4", "/dev/nvidiactl"}, Slice: protocol.GPUSlice{UUID: "GPU-4", MemoryMiB: 1024, Cores: 5}}, true, nil
	}
	return ClaimGrant{}, true, errors.New("this node prepared no such claim for this pod")
}

func claimHook(pods ...*corev1.Pod) *Hook {
	f := fakePods{}
	for _, p := range pods {
		f[p.Namespace+"/"+p.Name] = p
	}
	r := rules()
	r.Claims = fakeClaims
	return New(r, f, 10*time.Millisecond, &nopObserver{}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func draPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app"}}}}
}

// claimContainer is a container as the runtime shows it with a claim's
// CDI device injected: the device nodes it brings are already there.
func claimContainer(cdi ...string) *api.Container {
	ctr := &api.Container{Name: "app", Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{
		{Path: "/dev/nvidia3", Type: "c", Major: 195, Minor: 3}, {Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}}}
	for _, n := range cdi {
		ctr.CDIDevices = append(ctr.CDIDevices, &api.CDIDevice{Name: n})
	}
	return ctr
}

// A container kubelet gave a claim's CDI device gets the slice the node
// prepared for that claim, in the env the hook alone writes; the device
// nodes the claim's device brings are inside the books.
func TestAClaimsContainerGetsItsPreparedSlice(t *testing.T) {
	pod := draPod("dra")
	h := claimHook(pod)
	ctr := claimContainer(claimDevice)
	adj, _, err := h.CreateContainer(context.Background(), sandbox(pod), ctr)
	if err != nil {
		t.Fatal(err)
	}
	env := envAfter(ctr, adj)
	if env["NVIDIA_VISIBLE_DEVICES"] != "GPU-3" || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "10240m" || env["CUDA_DEVICE_SM_LIMIT"] != "30" {
		t.Errorf("env %v", env)
	}
}

// A claim's device is refused where the node did not prepare it for
// this pod, where the node serves no claims, and beside a GPU device
// node the claim does not bring; a claim's name in a CDI annotation is a
// GPU outside the books.
func TestAClaimsDeviceOutsideTheRecordIsRefused(t *testing.T) {
	pod, other := draPod("dra"), draPod("other")
	for _, tc := range []struct {
		name string
		h    *Hook
		pod  *corev1.Pod
		ctr  *api.Container
		want string
	}{
		{"another pod's claim", claimHook(other), other, claimContainer(claimDevice), "prepared no such claim"},
		{"a claim not prepared", claimHook(pod), pod, claimContainer("gpu.vgpud.io/claim=c-9-0"), "prepared no such claim"},
		{"no claims served here", func() *Hook { h, _ := testHook(pod); return h }(), pod, claimContainer(claimDevice), "did not grant"},
		{"a GPU beyond the claim", claimHook(pod), pod, func() *api.Container {
			c := claimContainer(claimDevice)
			c.Linux.Devices = append(c.Linux.Devices, &api.LinuxDevice{Path: "/dev/nvidia4", Type: "c", Major: 195, Minor: 4})
			return c
		}(), "device node /dev/nvidia4"},
		{"a claim by annotation", claimHook(pod), pod, func() *api.Container {
			c := claimContainer()
			c.Linux.Devices = nil
			c.Annotations = map[string]string{"cdi.k8s.io/x": claimDevice}
			return c
		}(), "CDI annotation"},
	} {
		_, _, err := tc.h.CreateContainer(context.Background(), sandbox(tc.pod), tc.ctr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}

// Claims of different cores in one container are refused: it has one
// SM limit. (Which pods a claim serves is the node record's to say,
// tested there.)
func TestOneContainersClaimsAskTheSameCores(t *testing.T) {
	pod := draPod("dra")
	ctr := claimContainer(claimDevice, "gpu.vgpud.io/claim=c-2-0")
	ctr.Linux.Devices = append(ctr.Linux.Devices, &api.LinuxDevice{Path: "/dev/nvidia4", Type: "c", Major: 195, Minor: 4})
	if _, _, err := claimHook(pod).CreateContainer(context.Background(), sandbox(pod), ctr); err == nil || !strings.Contains(err.Error(), "one SM limit") {
		t.Errorf("claims of 30 and 5 cores: %v", err)
	}
}

// resyncClaim has a hook over a record holding claimDevice for pod
// uid-dra reconnect to a runtime that runs pod's container c1 with that
// device, and returns what it ended and what it told as granted.
func resyncClaim(t *testing.T, pod *corev1.Pod) (evicted []string, g *grants) {
	h := claimHook(pod)
	g = newGrants()
	h.Tell(g)
	var mu sync.Mutex
	h.EvictWith(func(id string, _ int) error {
		mu.Lock()
		defer mu.Unlock()
		evicted = append(evicted, id)
		return nil
	})
	sb := sandbox(pod)
	sb.Id = "sb1"
	ctr := claimContainer(claimDevice)
	ctr.Id, ctr.PodSandboxId, ctr.State, ctr.Pid = "c1", "sb1", api.ContainerState_CONTAINER_RUNNING, 11
	ctr.Env = []string{"NVIDIA_VISIBLE_DEVICES=GPU-3", "CUDA_DEVICE_MEMORY_LIMIT_0=10240m"}
	if _, err := h.Synchronize(context.Background(), []*api.PodSandbox{sb}, []*api.Container{ctr}); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(evicted), g
}

// A hook that reconnects to a runtime running a claim's container (the
// node role restarted) resolves its claims from the record again: the
// container is told as granted, measured as before, and not ended.
func TestSynchronizeKeepsClaimsContainers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		evicted, g := resyncClaim(t, draPod("dra"))
		if len(evicted) != 0 {
			t.Errorf("ended %v, a claim's container holding its grant", evicted)
		}
		if a, ok := g.get("c1"); !ok || len(a.GPUs) != 1 || a.GPUs[0].UUID != "GPU-3" || a.GPUs[0].MemoryMiB != 10240 {
			t.Errorf("told %+v %v; want its GPU-3 share of 10240 MiB", a, ok)
		}
	})
}

// A claim's container the node's record does not grant at a
// reconnection (the record lost, the claim not prepared for its pod) is
// ended, to restart through the hook, not left running unmeasured.
func TestSynchronizeEndsClaimsContainersTheRecordRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		evicted, g := resyncClaim(t, draPod("stranger")) // the record holds no claim for it
		if len(evicted) != 1 || evicted[0] != "c1" {
			t.Errorf("ended %v; want c1", evicted)
		}
		if _, ok := g.get("c1"); ok {
			t.Error("told as granted")
		}
	})
}
