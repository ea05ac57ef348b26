//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// gpuComesAndGoes: a GPU of vgpud-node-3 falls off the machine while a
// tenant's pod runs on it. Without a restart the node role sees it gone
// at its next rescan: kubelet's allocatable, the inventory and an Event
// on the Node say so, the cluster view names the pod on the GPU gone, and
// a pod aimed at that GPU finds no node. Put back, it is offered again.
func gpuComesAndGoes(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns, node = "e2e-comego", "vgpud-node-3"
	newTenant(t, e, ns)
	e.idleGPUs(t)
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	inventory := func() protocol.Inventory { t.Helper(); return e.inventory(t, node) }
	before := inventory()
	last := before.GPUs[len(before.GPUs)-1]
	create := func(name string) {
		t.Helper()
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem": "1000"}, map[string]string{wellknown.AnnotationUseGPUUUID: last.UUID})
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil).CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("on-it")
	e.waitRunning(t, ns, []string{"on-it"}, 90*time.Second)

	if out, err := e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "inspect", fmt.Sprintf("--mock-unplug=%d", last.Index)); err != nil {
		t.Fatalf("unplug: %v %s", err, out)
	}
	unplugged := time.Now()
	harness.Eventually(t, 30*time.Second, "the inventory without the GPU", func() error {
		if inv := inventory(); len(inv.GPUs) != len(before.GPUs)-1 {
			return fmt.Errorf("%d GPUs", len(inv.GPUs))
		}
		return nil
	})
	seen := time.Since(unplugged)
	harness.Eventually(t, 30*time.Second, "kubelet's allocatable without the GPU", func() error {
		got, _, err := e.allocatable(node)
		if err != nil {
			return err
		}
		if want := devices(before) - int64(last.Split); got != want {
			return fmt.Errorf("allocatable %d, want %d", got, want)
		}
		return nil
	})
	harness.Eventually(t, 30*time.Second, "a GPUsChanged Event on the Node", func() error {
		evs, err := e.kube.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + node})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "GPUsChanged" && strings.Contains(ev.Note, "gone: "+last.UUID) {
				return nil
			}
		}
		return fmt.Errorf("%d Events on %s, none GPUsChanged naming %s", len(evs.Items), node, last.UUID)
	})
	out, err := e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "inspect", "--cluster", "--json")
	if err != nil {
		t.Fatalf("inspect --cluster: %v %s", err, out)
	}
	var view inspectv1.ClusterView
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("inspect --cluster --json: %v", err)
	}
	// Its only GPU gone, the pod holds nothing on the node: not booked,
	// and named with the GPU.
	if !slices.ContainsFunc(view.Problems, func(p string) bool { return strings.Contains(p, ns+"/on-it") && strings.Contains(p, last.UUID) }) {
		t.Errorf("the cluster view does not name the pod on the GPU gone: %q", view.Problems)
	}
	create("aimed")
	harness.Eventually(t, 60*time.Second, "a pod aimed at the GPU gone is refused", func() error {
		return e.eventSays(ns, "aimed", "excluded by use/nouse-gputype or -gpuuuid")
	})
	t.Logf("GPU %d of %s unplugged: inventory without it after %v", last.Index, node, seen.Round(100*time.Millisecond))

	if out, err := e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "inspect", fmt.Sprintf("--mock-plug=%s", last.UUID)); err != nil {
		t.Fatalf("plug: %v %s", err, out)
	}
	harness.Eventually(t, 30*time.Second, "the GPU back in the inventory", func() error {
		if inv := inventory(); len(inv.GPUs) != len(before.GPUs) {
			return fmt.Errorf("%d GPUs", len(inv.GPUs))
		}
		return nil
	})
	// The aimed pod runs once the GPU is back: nudged by the books when
	// it returned, or when on-it goes.
	e.waitRunning(t, ns, []string{"aimed"}, 90*time.Second)
}
