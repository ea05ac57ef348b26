//go:build e2e

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// onDemandMIG: vgpud-node-3 gets, beside its L4s and the A100 with the
// operator's instances, an H100 80GB in MIG mode with none, on which the
// node makes instances on demand (the overrides' migOnDemand; the mock
// holds the H100 driver's geometry). Three pods of three sizes, each
// tied to the H100 by its UUID, get the smallest profile that holds them
// at a placement nothing else takes: made as they are bound, handed to
// their containers as MIG devices. The node role restarts in the middle
// and finds them in its record; a fourth pod, too large for what is
// left, waits until the three are deleted and their instances destroyed,
// one only once a process left on it has ended.
// The overrides are put back after.
func onDemandMIG(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns, node = "e2e-mig-demand", "vgpud-node-3"
	newTenant(t, e, ns)
	e.idleGPUs(t)
	restore := e.setOverrides(t, withOnDemandH100(t, e.overrides(t)))
	t.Cleanup(func() { restore(); e.restartNodeRole(t, node) })
	e.restartNodeRole(t, node)

	var h100 protocol.MIGGPU
	harness.Eventually(t, 60*time.Second, "the H100 listed with the instances it may make", func() error {
		for _, g := range e.inventory(t, node).MIG {
			if strings.Contains(g.Model, "H100") && len(g.Possible) == 18 && len(g.Instances) == 0 {
				h100 = g
				return nil
			}
		}
		return fmt.Errorf("no H100 with 18 possible instances in %+v", e.inventory(t, node).MIG)
	})
	tenant := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)
	create := func(name, mem string) {
		t.Helper()
		p := gpuPod(name, map[string]string{"nvidia.com/gpumem": mem}, map[string]string{wellknown.AnnotationGPUMode: "mig", wellknown.AnnotationUseGPUUUID: h100.UUID})
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := tenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Whichever kube-scheduler places first, the three profiles fit
	// side by side (4 + 2 + 1 of the H100's 8 memory slots).
	create("small", "9000")   // 1g.10gb
	create("medium", "15000") // 1g.20gb: fewer SMs than 2g.20gb
	create("large", "30000")  // 3g.40gb
	took := e.waitRunning(t, ns, []string{"small", "medium", "large"}, 120*time.Second)
	profiles := map[string]string{"small": "1g.10gb", "medium": "1g.20gb", "large": "3g.40gb"}
	made := func() map[string]string {
		out := map[string]string{}
		for _, g := range e.inventory(t, node).MIG {
			for _, p := range g.Possible {
				if p.Made != "" {
					out[p.UUID] = p.Made
				}
			}
		}
		return out
	}
	var devices map[string]string
	harness.Eventually(t, 30*time.Second, "the three instances made, in the inventory", func() error {
		if devices = made(); len(devices) != 3 {
			return fmt.Errorf("made %v", devices)
		}
		return nil
	})
	possible := map[string]protocol.MIGInstance{}
	for _, p := range h100.Possible {
		possible[p.UUID] = p
	}
	var placed []protocol.MIGInstance
	ids := map[string]string{} // each pod's instance
	for name, profile := range profiles {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil {
			t.Fatal(err)
		}
		s := a.Containers[0].GPUs[0]
		id, in := s.UUID, possible[s.UUID]
		ids[name] = id
		if in.Profile != profile || !s.Make || s.MemoryMiB != in.MemoryMiB {
			t.Errorf("%s: slice %+v, want a %s instance to make, charged its %d MiB", name, s, profile, in.MemoryMiB)
		}
		for _, o := range placed {
			if in.Start < o.Start+o.Size && o.Start < in.Start+in.Size {
				t.Errorf("%s's %s at %d+%d overlaps %s at %d+%d", name, in.Profile, in.Start, in.Size, o.Profile, o.Start, o.Size)
			}
		}
		placed = append(placed, in)
		env := e.containerEnv(t, ns, name)
		if dev := env[containerenv.EnvVisibleDevices]; dev != devices[id] || !strings.HasPrefix(dev, "MIG-") {
			t.Errorf("%s's container sees %q; want the MIG device made for %s, %s", name, dev, id, devices[id])
		}
	}
	t.Logf("three pods on instances made for them (1g.10gb, 1g.20gb, 3g.40gb), running in %v", took.Round(time.Millisecond))
	// vgpud inspect on the node shows the three under the H100's index,
	// held, and none of the instances it could make but has not.
	var rows []string
	for _, g := range e.inspect(t, node).GPUs {
		if g.Parent == h100.UUID {
			rows = append(rows, fmt.Sprintf("%d %s used %d", g.Index, g.MIG, g.SlicesUsed))
			if g.SlicesUsed != 1 || g.Index != h100.Index {
				t.Errorf("vgpud inspect row %+v: want GPU %d's instance, held", g, h100.Index)
			}
		}
	}
	if len(rows) != 3 {
		t.Errorf("vgpud inspect on %s shows the H100's instances as %v; want the three made", node, rows)
	}

	// Too large for what is left: 7g.80gb overlaps all three.
	create("whole", "70000")
	harness.Eventually(t, 60*time.Second, "the fourth refused, saying why", func() error {
		return e.eventSays(ns, "whole", "no room for a MIG instance")
	})

	// The node role restarts: its record names the three, which it finds
	// on the GPU (the mock keeps its instances across the restart, as a
	// driver does) and keeps, making none again.
	restart := e.restartNodeRole(t, node)
	if again := made(); fmt.Sprint(again) != fmt.Sprint(devices) {
		t.Fatalf("after the restart, made %v; want %v", again, devices)
	}
	e.waitRunning(t, ns, []string{"small", "medium", "large"}, 10*time.Second)
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the restarted node role finds the three", func() error {
		logs, err := e.kubectl("-n", system, "logs", vp.Name)
		if err != nil {
			return err
		}
		if n := strings.Count(logs, "a MIG instance vgpud made is there still"); n != 3 || strings.Contains(logs, "made a MIG instance") {
			return fmt.Errorf("found %d, made again %v", n, strings.Contains(logs, "made a MIG instance"))
		}
		return nil
	})
	t.Logf("node role on %s restarted in %v; it found the three instances it made, made none again, the pods running", node, restart.Round(time.Millisecond))

	// Deleted, their instances are destroyed, and the fourth gets a
	// 7g.80gb made for it; but not while a process still runs on one
	// (declared on the mock: this test's own, a host process outside
	// any pod, as one that escaped its pod would be).
	large := devices[ids["large"]]
	e.declareProcess(t, vp, large, os.Getpid(), 100, -1)
	undeclared := false
	t.Cleanup(func() {
		if !undeclared {
			e.declareProcess(t, vp, large, os.Getpid(), 0, -1)
		}
	})
	grace := int64(0)
	for _, name := range []string{"small", "medium", "large"} {
		if err := e.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
	}
	// Kept, it is offered to no pod: the inventory lists neither it nor
	// any instance overlapping its placement.
	in := possible[ids["large"]]
	harness.Eventually(t, 60*time.Second, "large's instance kept for the process on it, offered to none, the other two destroyed", func() error {
		logs, err := e.kubectl("-n", system, "logs", vp.Name)
		if err != nil {
			return err
		}
		if !strings.Contains(logs, "processes still run on it") {
			return fmt.Errorf("the node role's log does not say it waits for the process")
		}
		if now := made(); len(now) != 0 {
			return fmt.Errorf("listed as made %v; want none (the two destroyed, large's hidden)", now)
		}
		for _, g := range e.inventory(t, node).MIG {
			for _, p := range g.Possible {
				if g.UUID == h100.UUID && p.Start < in.Start+in.Size && in.Start < p.Start+p.Size {
					return fmt.Errorf("%s at %d+%d offered, over large's kept instance at %d+%d", p.Profile, p.Start, p.Size, in.Start, in.Size)
				}
			}
		}
		return nil
	})
	if p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "whole", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p.Spec.NodeName != "" {
		t.Fatalf("the fourth pod placed on %s while a process holds large's instance", p.Spec.NodeName)
	}
	// Kept, it stays charged to the namespace of the pod last booked on
	// it (#50 item 7): a pod the quota holds beside the waiting one
	// alone is refused at create, saying so.
	quota := int64(70000) + in.MemoryMiB + 10000
	quotas := e.kube.CoreV1().ResourceQuotas(ns)
	if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		"requests.nvidia.com/gpumem": *resource.NewQuantity(quota, resource.DecimalSI)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = quotas.Delete(context.Background(), "gpu", metav1.DeleteOptions{}) })
	harness.Eventually(t, 30*time.Second, "a pod refused: large's kept instance is charged to "+ns, func() error {
		p := gpuPod("extra", map[string]string{"nvidia.com/gpumem": "15000"}, map[string]string{wellknown.AnnotationGPUMode: "mig", wellknown.AnnotationUseGPUUUID: h100.UUID})
		_, err := tenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			// The webhook may not have read the quota yet.
			_ = e.kube.CoreV1().Pods(ns).Delete(ctx, "extra", metav1.DeleteOptions{GracePeriodSeconds: &grace})
			return fmt.Errorf("extra admitted under a %d MiB quota beside whole's 70000 and large's kept %d", quota, in.MemoryMiB)
		}
		return harness.Contains(err.Error(), fmt.Sprintf("in use %d (%d of it held beyond the pods' slices", 70000+in.MemoryMiB, in.MemoryMiB))
	})
	t.Logf("large's kept %s (%d MiB) charged to %s: a 15000 MiB pod refused under a %d MiB quota", in.Profile, in.MemoryMiB, ns, quota)
	// A process of a pod the node granted (a slice of an L4) that holds
	// the kept instance too is past a slice of nothing there: the node,
	// enforcing for this scenario, kills it as any process past its slice.
	intruder := gpuPod("intruder", map[string]string{"nvidia.com/gpumem": "1000"}, map[string]string{wellknown.AnnotationUseGPUType: "L4"})
	intruder.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	if _, err := tenant.CoreV1().Pods(ns).Create(ctx, intruder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"intruder"}, 60*time.Second)
	ipid := e.processIn(t, ns, "intruder", "sleep 3600")
	e.declareProcess(t, vp, large, ipid, 2000, -1) // past the node's 1024 MiB margin
	killed := harness.Eventually(t, 20*time.Second, "the intruder's process on large's kept instance killed", func() error {
		if err := syscall.Kill(ipid, 0); !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("process %d still runs (%v)", ipid, err)
		}
		return nil
	})
	t.Logf("the intruder's process %d on large's kept instance, past a slice of nothing there, killed in %v", ipid, killed.Round(time.Millisecond))
	e.declareProcess(t, vp, large, os.Getpid(), 0, -1)
	undeclared = true
	freed := e.waitRunning(t, ns, []string{"whole"}, 120*time.Second)
	if now := made(); len(now) != 1 || now[protocol.OnDemandID(h100.UUID, "7g.80gb", 0)] == "" {
		t.Errorf("after the three went, made %v; want the 7g.80gb alone", now)
	}
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "whole", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "nothing made once every pod is gone", func() error {
		if now := made(); len(now) > 0 {
			return fmt.Errorf("still made: %v", now)
		}
		return nil
	})
	t.Logf("the three destroyed and a 7g.80gb made for the waiting pod in %v; it destroyed after", freed.Round(time.Millisecond))
}

// withOnDemandH100 is the overlay's overrides with node-3's backend given
// an H100 in MIG mode, index 5, on which the node makes instances, and
// its GPU usage enforced (in place of the overlay's report).
func withOnDemandH100(t *testing.T, yaml string) string {
	t.Helper()
	lines := strings.Split(yaml, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "- name: vgpud-node-3" && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "gpuUsage: report" {
			lines = slices.Delete(lines, i+1, i+2)
			break
		}
	}
	for i, l := range lines {
		if strings.Contains(l, "backend:") && strings.HasSuffix(l, "mig=3g.20gb+2g.10gb+1g.5gb\"") {
			indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
			lines[i] = strings.TrimSuffix(l, "\"") + ",1xH100-SXM5-80GB:81920:mig=\""
			return strings.Join(append(lines[:i+1], append([]string{indent + "migOnDemand: [\"5\"]", indent + "gpuUsage: enforce"}, lines[i+1:]...)...), "\n")
		}
	}
	t.Fatalf("no backend line for node-3's A100 in the overrides:\n%s", yaml)
	return ""
}

// overrides is the node-overrides.yaml of vgpud's ConfigMap.
func (e env) overrides(t *testing.T) string {
	t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(system).Get(context.Background(), "vgpud", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["node-overrides.yaml"]
}

// setOverrides writes node-overrides.yaml and returns what puts the
// old one back; a node role reads it when it starts.
func (e env) setOverrides(t *testing.T, yaml string) (restore func()) {
	t.Helper()
	old := e.overrides(t)
	write := func(v string) error {
		patch := fmt.Sprintf(`{"data":{"node-overrides.yaml":%q}}`, v)
		_, err := e.kube.CoreV1().ConfigMaps(system).Patch(context.Background(), "vgpud", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	if err := write(yaml); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := write(old); err != nil {
			t.Errorf("put the overrides back: %v", err)
		}
	}
}

// restartNodeRole deletes node's vgpud pod and waits for its successor
// to be ready and advertising what its inventory lists.
func (e env) restartNodeRole(t *testing.T, node string) time.Duration {
	t.Helper()
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kube.CoreV1().Pods(system).Delete(context.Background(), vp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return harness.Eventually(t, 120*time.Second, "the node role back on "+node, func() error {
		np, err := e.vgpudPod(node)
		if err != nil || np.UID == vp.UID {
			return fmt.Errorf("the old pod still serves (%v)", err)
		}
		if !podReady(np) {
			return fmt.Errorf("%s not ready", np.Name)
		}
		return e.advertising(node)
	})
}
