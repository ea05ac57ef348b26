package clusterview

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func node(t *testing.T, name string, gpus ...protocol.GPU) corev1.Node {
	t.Helper()
	raw, err := protocol.EncodeInventory(protocol.Inventory{GPUs: gpus})
	if err != nil {
		t.Fatal(err)
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing, wellknown.AnnotationIdentity: wellknown.IdentityRuntime}}}
}

func a100(i int) protocol.GPU {
	return protocol.GPU{UUID: "GPU-a" + string(rune('0'+i)), Index: i, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true}
}

func pod(t *testing.T, ns, name, scheduler, bound string, a protocol.Assignment, phase corev1.PodPhase) corev1.Pod {
	t.Helper()
	raw, err := protocol.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{wellknown.AnnotationAssignment: raw}},
		Spec: corev1.PodSpec{SchedulerName: scheduler, NodeName: bound}, Status: corev1.PodStatus{Phase: phase}}
	for _, c := range a.Containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.Name})
	}
	return p
}

func slice(uuid string, mem int64, cores int) protocol.ContainerAssignment {
	return protocol.ContainerAssignment{Name: "main", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: mem, Cores: cores}}}
}

// The view sums each GPU's slices, names their pods, charges namespaces
// by bind's rule (a GPU held whole counts its memory) against their
// quotas, and says which annotations it, like the leader, did not book.
func TestBuild(t *testing.T) {
	const sched = "vgpud-scheduler"
	names := wellknown.DefaultResourceNames()
	nodes := []corev1.Node{node(t, "n1", a100(0), a100(1)), {ObjectMeta: metav1.ObjectMeta{Name: "cpu-only"}}}
	on := func(c protocol.ContainerAssignment) protocol.Assignment {
		return protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{c}}
	}
	pods := []corev1.Pod{
		pod(t, "ai", "small", sched, "n1", on(slice("GPU-a0", 4000, 30)), corev1.PodRunning),
		pod(t, "ai", "pending", sched, "", on(slice("GPU-a0", 1000, 0)), corev1.PodPending),
		pod(t, "ml", "whole", sched, "n1", on(slice("GPU-a1", 1, 100)), corev1.PodRunning),
		pod(t, "ml", "done", sched, "n1", on(slice("GPU-a1", 9000, 0)), corev1.PodSucceeded),
		pod(t, "ml", "forged", "default-scheduler", "n1", on(slice("GPU-a0", 30000, 0)), corev1.PodRunning),
		pod(t, "ml", "oversized", sched, "n1", on(slice("GPU-a0", 50000, 0)), corev1.PodRunning),
	}
	quotas := []corev1.ResourceQuota{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "gpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("50000")}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "idle", Name: "gpu"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"nvidia.com/gpucores": resource.MustParse("200")}}},
	}
	v := Build(nodes, pods, quotas, sched, names, time.Now())
	if len(v.Nodes) != 1 || len(v.Nodes[0].GPUs) != 2 {
		t.Fatalf("nodes %+v", v.Nodes)
	}
	g0, g1 := v.Nodes[0].GPUs[0], v.Nodes[0].GPUs[1]
	if g0.MemoryUsedMiB != 5000 || g0.CoresUsed != 30 || g0.SlotsUsed != 2 || strings.Join(g0.Pods, ",") != "ai/small,ai/pending" {
		t.Errorf("GPU 0: %+v", g0)
	}
	if g1.MemoryUsedMiB != 1 || !g1.Exclusive || g1.SlotsUsed != 1 || strings.Join(g1.Pods, ",") != "ml/whole" {
		t.Errorf("GPU 1: %+v", g1)
	}
	if len(v.Namespaces) != 3 {
		t.Fatalf("namespaces %+v", v.Namespaces)
	}
	ai, idle, ml := v.Namespaces[0], v.Namespaces[1], v.Namespaces[2]
	// Each slice is charged at least a slot's share: 4096 MiB, 10 cores.
	if ai.MemoryUsedMiB != 8192 || ai.CoresUsed != 40 || ai.MemoryLimit != nil {
		t.Errorf("ai %+v", ai)
	}
	if idle.CoresLimit == nil || *idle.CoresLimit != 200 || idle.MemoryUsedMiB != 0 {
		t.Errorf("idle %+v", idle)
	}
	if ml.MemoryUsedMiB != 40960 || ml.MemoryLimit == nil || *ml.MemoryLimit != 50000 {
		t.Errorf("ml charged %d of %v, want a whole GPU's 40960 of 50000", ml.MemoryUsedMiB, ml.MemoryLimit)
	}
	if len(v.Problems) != 2 || !strings.Contains(v.Problems[0], "pod ml/forged") || !strings.Contains(v.Problems[1], "pod ml/oversized: assignment not booked on node n1") {
		t.Errorf("problems %q", v.Problems)
	}
	var out bytes.Buffer
	if err := Render(&out, v, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"n1    1    A100   1/40960", "ml/whole", "ml         40960", "9040 of 50000", "not booked: pod ml/forged"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("rendered view lacks %q:\n%s", want, out.String())
		}
	}
}

// Pods HAMi placed show as their record says, by the books' rule: held
// slices on their node, charged to their namespace; a record that does
// not fit is a problem, not a booking.
func TestBuildCountsHAMiRecords(t *testing.T) {
	hami := func(name, node, record string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "old", Name: name, Annotations: map[string]string{
			hamirecord.AnnotationHAMiAllocated: record, hamirecord.AnnotationHAMiNode: node}},
			Spec: corev1.PodSpec{SchedulerName: "hami-scheduler", NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	pods := []corev1.Pod{
		hami("placed", "n1", "GPU-a0,NVIDIA,40960,100:;GPU-a1,NVIDIA,2000,10:;"),
		hami("elsewhere", "n1", "GPU-a1,NVIDIA,1000,10:;"),
	}
	pods[1].Annotations[hamirecord.AnnotationHAMiNode] = "n2"
	v := Build([]corev1.Node{node(t, "n1", a100(0), a100(1))}, pods, nil, "vgpud-scheduler", wellknown.DefaultResourceNames(), time.Now())
	g0, g1 := v.Nodes[0].GPUs[0], v.Nodes[0].GPUs[1]
	if g0.MemoryUsedMiB != 40960 || !g0.Exclusive || g1.MemoryUsedMiB != 2000 || g1.CoresUsed != 10 {
		t.Fatalf("GPUs %+v, %+v", g0, g1)
	}
	if len(g0.Pods) != 1 || g0.Pods[0] != "old/placed" {
		t.Fatalf("GPU 0 held by %v", g0.Pods)
	}
	// The whole GPU, and a slot's share (4096 MiB) of the other.
	if len(v.Namespaces) != 1 || v.Namespaces[0].MemoryUsedMiB != 40960+4096 {
		t.Fatalf("namespaces %+v", v.Namespaces)
	}
	if len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "old/elsewhere") || !strings.Contains(v.Problems[0], "names node n2") {
		t.Fatalf("problems %q", v.Problems)
	}
	// Each booked record is listed with its pod's age, for an audit.
	if len(v.HAMi) != 1 || v.HAMi[0].Pod != "old/placed" || v.HAMi[0].Node != "n1" || strings.Join(v.HAMi[0].Slices, ",") != "GPU-a0 40960/100%,GPU-a1 2000/10%" {
		t.Fatalf("HAMi records %+v", v.HAMi)
	}
	v.At = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	v.HAMi[0].Created = metav1.NewTime(v.At.Add(-400 * 24 * time.Hour))
	var out bytes.Buffer
	if err := Render(&out, v, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "BOOKED FROM HAMI'S RECORD") || !regexp.MustCompile(`old/placed\s+n1\s+400d\s+2025-10-23T00:00:00Z\s+GPU-a0 40960/100%, GPU-a1 2000/10%`).MatchString(out.String()) {
		t.Fatalf("rendered:\n%s", out.String())
	}
}

func TestBuildShowsEachNodesPublishedUse(t *testing.T) {
	n1 := node(t, "n1", protocol.GPU{UUID: "GPU-aaaaaaaa-1", Index: 0, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true})
	raw, err := protocol.EncodeUsage(protocol.NodeUsage{Mode: "enforce", Containers: []protocol.ContainerUsage{
		{Namespace: "t", Pod: "greedy", Container: "main", GPU: "GPU-aaaaaaaa-1", UsedMiB: 960, SliceMiB: 1000, SMPercent: 35, Cores: 20, Kills: 1}},
		Unattributed: []protocol.GPUMemory{{GPU: "GPU-aaaaaaaa-1", UsedMiB: 2944}}})
	if err != nil {
		t.Fatal(err)
	}
	n1.Annotations[wellknown.AnnotationUsage] = raw
	n2 := node(t, "n2", protocol.GPU{UUID: "GPU-bbbbbbbb-1", Index: 0, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true})
	n2.Annotations[wellknown.AnnotationUsage] = `{"version":1,"containers":[{"usedMiB":-1}]}`
	v := Build([]corev1.Node{n1, n2}, nil, nil, "vgpud-scheduler", wellknown.DefaultResourceNames(), time.Now())
	if v.Nodes[0].Use == nil || v.Nodes[0].Use.Containers[0].Kills != 1 || v.Nodes[1].Use != nil || len(v.Problems) != 1 {
		t.Fatalf("use %+v, %+v; problems %v", v.Nodes[0].Use, v.Nodes[1].Use, v.Problems)
	}
	var b strings.Builder
	if err := Render(&b, v, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"n1 (enforce)", "t/greedy", "960/1000", "35/20", "unattributed", "2944/-"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestBuildShowsEachNodesRuntimeCheck(t *testing.T) {
	n1 := node(t, "n1", protocol.GPU{UUID: "GPU-aaaaaaaa-1", Index: 0, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true})
	n1.Annotations[wellknown.AnnotationRuntime] = `{"result":"fails-open","runtime":"containerd","problems":["NRI's default validator is off"]}`
	n2 := node(t, "n2", protocol.GPU{UUID: "GPU-bbbbbbbb-1", Index: 0, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true})
	n2.Annotations[wellknown.AnnotationRuntime] = `{"result":"fails-closed","runtime":"containerd"}`
	n3 := node(t, "n3", protocol.GPU{UUID: "GPU-cccccccc-1", Index: 0, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true})
	n3.Annotations[wellknown.AnnotationRuntime] = `{"result":`
	n4 := node(t, "n4", protocol.GPU{UUID: "GPU-dddddddd-1", Index: 0, Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true})
	n4.Annotations[wellknown.AnnotationRuntime] = `{"result":"fine\u001b[2J","runtime":"containerd"}`
	v := Build([]corev1.Node{n1, n2, n3, n4}, nil, nil, "vgpud-scheduler", wellknown.DefaultResourceNames(), time.Now())
	if v.Nodes[0].Runtime == nil || v.Nodes[1].Runtime == nil || v.Nodes[2].Runtime != nil || v.Nodes[3].Runtime != nil || len(v.Problems) != 2 || strings.ContainsRune(v.Problems[1], 0x1b) {
		t.Fatalf("runtime %+v, %+v, %+v; problems %v", v.Nodes[0].Runtime, v.Nodes[1].Runtime, v.Nodes[2].Runtime, v.Problems)
	}
	var b strings.Builder
	if err := Render(&b, v, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"n1 (runtime FAILS-OPEN)", "runtime on n1 (containerd): FAILS-OPEN", "validator is off"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "n2 (runtime") || strings.Contains(out, "runtime on n2") {
		t.Errorf("a node that fails closed is flagged:\n%s", out)
	}
}

// An operator's cordon shows on its GPUs; entries that name no GPU of the
// node, or a value the leader cannot read, are problems.
func TestBuildShowsCordonedGPUs(t *testing.T) {
	n1 := node(t, "n1", a100(0), a100(1))
	n1.Annotations[wellknown.AnnotationCordon] = "GPU-gone"
	n1.Annotations[wellknown.AnnotationCordonHAMi] = "GPU-a1"
	n2 := node(t, "n2", a100(0))
	n2.Annotations[wellknown.AnnotationCordon] = "every\x1b[2J"
	v := Build([]corev1.Node{n1, n2}, nil, nil, "vgpud-scheduler", wellknown.DefaultResourceNames(), time.Now())
	if v.Nodes[0].GPUs[0].Cordoned || !v.Nodes[0].GPUs[1].Cordoned || len(v.Problems) != 2 ||
		!strings.Contains(v.Problems[0]+v.Problems[1], "cordon names GPU-gone, which the node does not have") || strings.ContainsRune(v.Problems[0]+v.Problems[1], 0x1b) {
		t.Fatalf("GPUs %+v; problems %q", v.Nodes[0].GPUs, v.Problems)
	}
	var b strings.Builder
	if err := Render(&b, v, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "healthy,cordoned") {
		t.Errorf("output lacks the cordon:\n%s", b.String())
	}
}

// A pod one of whose GPUs left its node (removed, or fallen off the bus)
// is a problem that names it, and its other GPU stays booked.
func TestBuildNamesPodsOnAGoneGPU(t *testing.T) {
	const sched = "vgpud-scheduler"
	two := protocol.ContainerAssignment{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-a0", MemoryMiB: 1000, Cores: 10}, {UUID: "GPU-gone", MemoryMiB: 1000, Cores: 10}}}
	a := protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{two}}
	v := Build([]corev1.Node{node(t, "n1", a100(0))}, []corev1.Pod{pod(t, "ai", "orphan", sched, "n1", a, corev1.PodRunning)}, nil, sched, wellknown.DefaultResourceNames(), time.Now())
	if len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "pod ai/orphan: its GPU GPU-gone is gone from node n1") {
		t.Fatalf("problems %q", v.Problems)
	}
	if g := v.Nodes[0].GPUs[0]; g.SlotsUsed != 1 || g.MemoryUsedMiB != 1000 {
		t.Fatalf("GPU 0 holds %+v; want the pod's slice still booked", g)
	}
}

// A node making MIG instances on demand shows the ones made or held,
// not every alternative it could make.
func TestBuildShowsMadeAndHeldInstancesOnly(t *testing.T) {
	g := protocol.MIGGPU{UUID: "GPU-h", MemoryMiB: 81559, SMs: 132, Healthy: true, Instances: []protocol.MIGInstance{}}
	for _, p := range []struct {
		profile string
		start   int
		made    string
	}{{"1g.10gb", 0, "MIG-made"}, {"1g.10gb", 1, ""}, {"1g.10gb", 2, ""}} {
		g.Possible = append(g.Possible, protocol.MIGInstance{UUID: protocol.OnDemandID(g.UUID, p.profile, p.start), Profile: p.profile, MemoryMiB: 9984, SMs: 16, Start: p.start, Size: 1, Made: p.made})
	}
	raw, err := protocol.EncodeInventory(protocol.Inventory{GPUs: []protocol.GPU{}, MIG: []protocol.MIGGPU{g}})
	if err != nil {
		t.Fatal(err)
	}
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: raw}}}
	held := protocol.OnDemandID("GPU-h", "1g.10gb", 2)
	a := protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: held, MemoryMiB: 9984, Cores: 13, MIG: true, Make: true}}}}}
	v := Build([]corev1.Node{n}, []corev1.Pod{pod(t, "ns", "p", "vgpud-scheduler", "n1", a, corev1.PodRunning)}, nil, "vgpud-scheduler", wellknown.DefaultResourceNames(), time.Now())
	var rows []string
	for _, r := range v.Nodes[0].GPUs {
		rows = append(rows, r.UUID)
	}
	if len(rows) != 2 || rows[0] != protocol.OnDemandID("GPU-h", "1g.10gb", 0) || rows[1] != held {
		t.Errorf("rows %v: want the made instance and the held one", rows)
	}
}

// What a node publishes its GPUs hold beyond their bookings shows on
// each GPU, as the leader counts it: less free, and full where full. A
// MIG instance holds none of its GPU's.
func TestBuildShowsMemoryHeldBeyondBookings(t *testing.T) {
	const sched = "vgpud-scheduler"
	n1 := node(t, "n1", a100(0), a100(1), a100(2))
	raw, err := protocol.EncodeUsage(protocol.NodeUsage{Mode: "enforce", Held: []protocol.GPUHeld{
		{GPU: "GPU-a0", MiB: 30000}, {GPU: "GPU-a1", MiB: 40000, Full: true}}})
	if err != nil {
		t.Fatal(err)
	}
	n1.Annotations[wellknown.AnnotationUsage] = raw
	n2 := node(t, "n2", a100(0))
	n2.Annotations[wellknown.AnnotationUsage] = `{"version":1,"mode":"enforce","containers":[],"held":[{"gpu":"GPU-a0","mib":-1}]}`
	on := protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{slice("GPU-a0", 4000, 10)}}
	v := Build([]corev1.Node{n1, n2}, []corev1.Pod{pod(t, "ai", "small", sched, "n1", on, corev1.PodRunning)}, nil, sched, wellknown.DefaultResourceNames(), time.Now())
	g := v.Nodes[0].GPUs
	if g[0].HeldMiB != 30000 || g[0].Full || g[0].MemoryUsedMiB != 4000 || g[1].HeldMiB != 40000 || !g[1].Full || g[2].HeldMiB != 0 || g[2].Full {
		t.Fatalf("GPUs %+v", g)
	}
	if v.Nodes[1].GPUs[0].HeldMiB != 0 || len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "node n2: vgpud.io/usage") || !strings.Contains(v.Problems[0], "the leader counts nothing held there") {
		t.Fatalf("bad usage: GPU %+v; problems %q", v.Nodes[1].GPUs[0], v.Problems)
	}
	var b strings.Builder
	if err := Render(&b, v, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`n1\s+0\s+A100\s+4000/40960\s+6960 \(30000 held\)\s+10/100\s+1/10\s+healthy\s+ai/small`),
		regexp.MustCompile(`n1\s+1\s+A100\s+0/40960\s+960 \(40000 held\)\s+0/100\s+0/10\s+healthy,full`),
		regexp.MustCompile(`n1\s+2\s+A100\s+0/40960\s+40960\s+0/100\s+0/10\s+healthy\s*\n`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}

	mig := protocol.MIGGPU{UUID: "GPU-m", Index: 0, Model: "A100", MemoryMiB: 40960, SMs: 98, Healthy: true,
		Instances: []protocol.MIGInstance{{UUID: "MIG-a", Profile: "3g.20gb", MemoryMiB: 19968, SMs: 42, Start: 0, Size: 4}}}
	inv, err := protocol.EncodeInventory(protocol.Inventory{GPUs: []protocol.GPU{}, MIG: []protocol.MIGGPU{mig}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err = protocol.EncodeUsage(protocol.NodeUsage{Mode: "enforce", Held: []protocol.GPUHeld{{GPU: "GPU-m", MiB: 1000}, {GPU: "MIG-a", MiB: 500, Full: true}}})
	if err != nil {
		t.Fatal(err)
	}
	n3 := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3", Annotations: map[string]string{wellknown.AnnotationGPUs: inv, wellknown.AnnotationUsage: raw}}}
	v = Build([]corev1.Node{n3}, nil, nil, sched, wellknown.DefaultResourceNames(), time.Now())
	if g := v.Nodes[0].GPUs; len(g) != 1 || g[0].UUID != "MIG-a" || g[0].HeldMiB != 0 || g[0].Full {
		t.Fatalf("MIG instance rows %+v", g)
	}
}

// The view says which version of its shape it is.
func TestViewSaysItsVersion(t *testing.T) {
	if v := Build(nil, nil, nil, "vgpud-scheduler", wellknown.DefaultResourceNames(), time.Now()); v.APIVersion != inspectv1.ClusterVersion {
		t.Errorf("apiVersion %q, want %q", v.APIVersion, inspectv1.ClusterVersion)
	}
}
