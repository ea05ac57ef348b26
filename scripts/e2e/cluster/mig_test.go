//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// staticMIG: vgpud-node-3 has, beside its L4s, an A100 40 GB in MIG mode
// with a 3g.20gb, a 2g.10gb and a 1g.5gb instance (the mock overlay), as
// an operator made them. Pods of three sizes asking MIG each get the
// smallest instance that holds them, whole, and their container sees
// only it; a fourth waits; a container asking two MIG devices is refused
// at create. The node role restarts in the middle: the running pods keep
// their instances, and a freed instance goes to the waiting pod. The
// namespace is charged each instance's memory and share of the SMs.
// Each profile is also a resource of its own (nvidia.com/mig-2g.10gb),
// which a pod may ask instead, as it would of NVIDIA's plugin.
func staticMIG(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const ns, node = "e2e-mig", "vgpud-node-3"
	newTenant(t, e, ns)
	e.idleGPUs(t)
	inv := e.inventory(t, node)
	if len(inv.MIG) != 1 || len(inv.MIG[0].Instances) != 3 {
		t.Fatalf("node %s: MIG GPUs %+v; the scenario needs one with three instances", node, inv.MIG)
	}
	parent := inv.MIG[0]
	byProfile := map[string]protocol.MIGInstance{}
	for _, in := range parent.Instances {
		byProfile[in.Profile] = in
	}
	// kubelet counts each instance once beside the L4s' slices (once
	// the last scenario's GPU put back reached it too).
	harness.Eventually(t, 60*time.Second, "kubelet told of every device", func() error { return e.advertising(node) })
	// And each profile under a resource of its own, NVIDIA's mixed way.
	profilesAdvertised := func() error { return e.profileResources(node, byProfile) }
	harness.Eventually(t, 60*time.Second, "each MIG profile a resource of its own", profilesAdvertised)
	tenant := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)
	pod := func(name string, limits, annotations map[string]string) *corev1.Pod {
		p := gpuPod(name, limits, annotations)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		return p
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := tenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mig := map[string]string{wellknown.AnnotationGPUMode: "mig"}
	sliceOf := func(name string) protocol.GPUSlice {
		t.Helper()
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 || len(a.Containers[0].GPUs) != 1 {
			t.Fatalf("%s: assignment %+v, %v", name, a, err)
		}
		return a.Containers[0].GPUs[0]
	}

	// A container asking two MIG devices is refused, saying why.
	_, err := tenant.CoreV1().Pods(ns).Create(ctx, pod("two", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}, mig), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "a process sees one MIG device") {
		t.Fatalf("two MIG devices in one container: %v", err)
	}
	// A profile vgpud's scheduler does not serve is refused, naming those it does.
	_, err = tenant.CoreV1().Pods(ns).Create(ctx, pod("unknown", map[string]string{"nvidia.com/mig-9g.99gb": "1"}, nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "a MIG profile vgpud's scheduler is not configured for; it serves 1g.5gb") {
		t.Fatalf("an unknown profile: %v", err)
	}
	// Three sizes, smallest first so no pod takes a larger instance than
	// it needs: 4000 MiB, 9000 MiB (HAMi's annotation), 40% of the GPU.
	create(pod("small", map[string]string{"nvidia.com/gpumem": "4000"}, mig))
	create(pod("medium", map[string]string{"nvidia.com/gpumem": "9000"}, map[string]string{wellknown.AnnotationGPUModeHAMi: "mig"}))
	create(pod("large", map[string]string{"nvidia.com/gpumem-percentage": "40"}, mig))
	took := e.waitRunning(t, ns, []string{"small", "medium", "large"}, 120*time.Second)
	for name, profile := range map[string]string{"small": "1g.5gb", "medium": "2g.10gb", "large": "3g.20gb"} {
		in := byProfile[profile]
		s := sliceOf(name)
		if s.UUID != in.UUID || !s.MIG || s.MemoryMiB != in.MemoryMiB || s.Cores != parent.Cores(in) {
			t.Errorf("%s got %+v; want the %s instance %s whole (%d MiB, %d%% of the SMs)", name, s, profile, in.UUID, in.MemoryMiB, parent.Cores(in))
		}
		if env := e.containerEnv(t, ns, name); env[containerenv.EnvVisibleDevices] != in.UUID || env[containerenv.EnvSMLimit] != "100" {
			t.Errorf("%s's container sees %v; want only %s, its SMs unthrottled", name, env, in.UUID)
		}
	}
	t.Logf("three pods on the 1g.5gb, 2g.10gb and 3g.20gb instances, running in %v", took.Round(time.Millisecond))

	// vgpud inspect on the node lists each instance as a row of its own,
	// under its GPU's index, held.
	held := 0
	for _, g := range e.inspect(t, node).GPUs {
		if g.Parent == parent.UUID && g.MIG == byProfile[g.MIG].Profile && g.SlicesUsed == 1 && g.Index == parent.Index {
			held++
		}
	}
	if held != 3 {
		t.Errorf("vgpud inspect on %s shows %d held MIG instances of GPU %d, want 3", node, held, parent.Index)
	}

	// Charged what each instance takes from the GPU.
	var mem int64
	var cores int
	for _, in := range parent.Instances {
		mem += in.MemoryMiB
		cores += parent.Cores(in)
	}
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the namespace charged each instance, the instances in the metrics", func() error {
		m, err := e.scrape(leader)
		if err != nil {
			return err
		}
		small := byProfile["1g.5gb"]
		return harness.Contains(m, fmt.Sprintf(`vgpud_namespace_quota_memory_used_bytes{namespace=%q} %g`, ns, float64(mem)*(1<<20)),
			fmt.Sprintf(`vgpud_namespace_quota_cores_used_ratio{namespace=%q} %g`, ns, float64(cores)/100),
			// Each instance under its own UUID, and which GPU it is of.
			fmt.Sprintf(`vgpud_gpu_mig_instance{gpu=%q,node=%q,profile="1g.5gb",uuid=%q} 1`, parent.UUID, node, small.UUID),
			fmt.Sprintf(`vgpud_gpu_allocated_slots{node=%q,uuid=%q} 1`, node, small.UUID))
	})

	create(pod("fourth", map[string]string{"nvidia.com/gpumem": "1000"}, mig))
	harness.Eventually(t, 60*time.Second, "the fourth refused: every instance held", func() error {
		return e.eventSays(ns, "fourth", "exclusive")
	})

	// The node role restarts: the running pods keep their instances,
	// which the restarted role finds under the same UUIDs.
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kube.CoreV1().Pods(system).Delete(ctx, vp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restart := harness.Eventually(t, 120*time.Second, "the node role back on "+node, func() error {
		np, err := e.vgpudPod(node)
		if err != nil || np.UID == vp.UID {
			return fmt.Errorf("the old pod still serves (%v)", err)
		}
		if !podReady(np) {
			return fmt.Errorf("%s not ready", np.Name)
		}
		if err := e.advertising(node); err != nil {
			return err
		}
		return profilesAdvertised()
	})
	if again := e.inventory(t, node); len(again.MIG) != 1 || fmt.Sprint(again.MIG[0].Instances) != fmt.Sprint(parent.Instances) {
		t.Fatalf("after the restart, MIG %+v; want the same instances", again.MIG)
	}
	e.waitRunning(t, ns, []string{"small", "medium", "large"}, 10*time.Second)
	t.Logf("node role on %s restarted and serving again in %v; the same instances, the pods running", node, restart.Round(time.Millisecond))

	// Freed, the smallest instance goes to the waiting pod.
	grace := int64(0)
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "small", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, ns, []string{"fourth"}, 120*time.Second)
	if s := sliceOf("fourth"); s.UUID != byProfile["1g.5gb"].UUID {
		t.Errorf("fourth got %s, want the freed 1g.5gb %s", s.UUID, byProfile["1g.5gb"].UUID)
	}

	// A profile asked by its own resource, as a pod written for NVIDIA's
	// mixed strategy does, no annotation: the freed 2g.10gb is taken, and
	// a 3g.20gb, still held, waits saying so.
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "medium", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	create(pod("by-profile", map[string]string{"nvidia.com/mig-2g.10gb": "1"}, nil))
	create(pod("by-profile-held", map[string]string{"nvidia.com/mig-3g.20gb": "1"}, nil))
	e.waitRunning(t, ns, []string{"by-profile"}, 120*time.Second)
	in := byProfile["2g.10gb"]
	if s := sliceOf("by-profile"); s.UUID != in.UUID || !s.MIG || s.MemoryMiB != in.MemoryMiB {
		t.Errorf("by-profile got %+v; want the 2g.10gb instance %s whole", s, in.UUID)
	}
	if env := e.containerEnv(t, ns, "by-profile"); env[containerenv.EnvVisibleDevices] != in.UUID {
		t.Errorf("by-profile's container sees %v; want only %s", env, in.UUID)
	}
	harness.Eventually(t, 60*time.Second, "a held profile waits, saying so", func() error {
		return e.eventSays(ns, "by-profile-held", "needs a MIG 3g.20gb instance")
	})
	t.Log("nvidia.com/mig-2g.10gb: 1 got the 2g.10gb instance; nvidia.com/mig-3g.20gb: 1 waits while the 3g.20gb is held")
	if over := oversubscribed(t, e); len(over) > 0 {
		t.Errorf("double-booked: %v", over)
	}
	for _, name := range []string{"large", "fourth", "by-profile", "by-profile-held"} {
		_ = e.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
}

// profileResources says whether kubelet on node counts each instance of
// byProfile under its profile's own resource.
func (e env) profileResources(node string, byProfile map[string]protocol.MIGInstance) error {
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for profile := range byProfile {
		res := corev1.ResourceName(wellknown.DefaultResourceNames().MIGResource(profile))
		if q := n.Status.Allocatable[res]; q.Value() != 1 {
			return fmt.Errorf("node %s: allocatable %s %s, want 1", node, res, q.String())
		}
	}
	return nil
}
