//go:build e2e

package cluster

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// TestFallback runs on a node with containerd 1.6, which has no NRI
// (make e2e brings one up with VGPUD_CONTAINERD=1.6 after TestCluster):
// the node says loudly that it guesses which pod kubelet admits, GPU
// pods still run on their slices, and admission refuses the pods that
// guessing would hand another pod's GPUs.
func TestFallback(t *testing.T) {
	if os.Getenv("VGPUD_CONTAINERD") != "1.6" {
		t.Skip("runs on a cluster with containerd 1.6 (VGPUD_CONTAINERD=1.6); make e2e brings one up")
	}
	e := setup(t)
	ctx := context.Background()
	if out, err := exec.Command(e.scripts + "/install.sh").CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	nodes := e.nodes(t)
	node := nodes[0]
	t.Run("the node says identity is guessed", func(t *testing.T) {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// containerd 1.6 cannot fail closed: the node setup's preflight
		// refused it, changed nothing, and said so on the node.
		if l, msg := n.Labels[wellknown.LabelNodeSetup], n.Annotations[wellknown.AnnotationNodeSetup]; l != wellknown.NodeSetupFailed || !strings.Contains(msg, "preflight refused, nothing was changed") || !strings.Contains(msg, "containerd://1.6") {
			t.Errorf("node setup on containerd 1.6: %s=%q, %q; want failed by preflight", wellknown.LabelNodeSetup, l, msg)
		}
		// And reported where kubectl describe node shows it.
		if evs, err := e.kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err != nil {
			t.Error(err)
		} else if !slices.ContainsFunc(evs.Items, func(ev eventsv1.Event) bool {
			return ev.Regarding.Kind == "Node" && ev.Regarding.Name == node && ev.Reason == "VgpudNodeSetupFailed" && ev.Type == "Warning"
		}) {
			t.Errorf("no VgpudNodeSetupFailed Warning Event on node %s among %d Events", node, len(evs.Items))
		}
		if id := n.Annotations[wellknown.AnnotationIdentity]; id != wellknown.IdentityGuessed {
			t.Errorf("%s=%q, want %q", wellknown.AnnotationIdentity, id, wellknown.IdentityGuessed)
		}
		if s := e.inspect(t, node); s.Identity != wellknown.IdentityGuessed {
			t.Errorf("inspect identity %q", s.Identity)
		} else if c := s.RuntimeCheck; c == nil || c.Result != protocol.RuntimeFailsOpen {
			// containerd 1.6's configuration has no NRI validator.
			t.Errorf("inspect's runtime check %+v, want fails-open", c)
		}
		vp, err := e.vgpudPod(node)
		if err != nil {
			t.Fatal(err)
		}
		logs, err := e.kubectl("-n", system, "logs", vp.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.Contains(logs, "IDENTITY IS GUESSED"); err != nil {
			t.Error(err)
		}
		raw, err := e.scrape(vp)
		if err != nil {
			t.Fatal(err)
		}
		sums, _, err := harness.MetricSums(strings.NewReader(string(raw)), "vgpud_node_identity", func(l map[string]string) string { return l["mode"] })
		if err != nil || sums["guessed"] != 1 || sums["runtime"] != 0 {
			t.Errorf("vgpud_node_identity %v, %v", sums, err)
		}
	})

	ns := "e2e-fallback"
	asTenant := newTenant(t, e, ns)
	t.Run("GPU pods run on their slices", func(t *testing.T) {
		for _, name := range []string{"one", "two"} {
			if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod(name, map[string]string{"nvidia.com/gpumem": "2000"}, nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e.waitRunning(t, ns, []string{"one", "two"}, 90*time.Second)
		for _, name := range []string{"one", "two"} {
			p, _ := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if ph := p.Annotations[wellknown.AnnotationPhase]; ph != string(protocol.PhaseAllocated) {
				t.Errorf("%s: phase %q, want %q (the guessing path records it)", name, ph, protocol.PhaseAllocated)
			}
			if env := e.containerEnv(t, ns, name); env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "2000m" {
				t.Errorf("%s sees %v", name, env)
			}
		}
	})
	t.Run("pinned and opted-out vGPU pods are refused at create", func(t *testing.T) {
		for name, spec := range map[string]string{
			"pinned":    "  nodeName: " + node + "\n",
			"opted-out": "  schedulerName: default-scheduler\n",
		} {
			y := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  labels: {vgpud.io/webhook: ignore}\nspec:\n" + spec +
				"  containers:\n  - {name: main, image: vgpud.local/busybox:1, command: [sleep, \"3600\"], resources: {limits: {nvidia.com/gpu: \"1\"}}}\n"
			out, err := asTenant(y, "apply", "-f", "-")
			if err == nil || harness.Contains(out, "ValidatingAdmissionPolicy 'vgpud-scheduled-only'") != nil {
				t.Fatalf("%s: %v %s", name, err, out)
			}
			t.Logf("%s refused: %s", name, strings.TrimSpace(out))
		}
	})
}
