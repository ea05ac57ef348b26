package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// residentNodes books, on bare nodes, pods by UID "uid-<name>".
type residentNodes struct {
	fakeNodes
	pods map[string][]fit.Resident
}

func (r residentNodes) Residents(name string) (fit.Node, []fit.Resident, *fit.Reason) {
	n, reason := r.NodeFor(name, "")
	if reason != nil {
		return fit.Node{}, nil, reason
	}
	return n, slices.Clone(r.pods[name]), nil
}

func booked(name, uuid string, mem int64) fit.Resident {
	return fit.Resident{Key: "uid-" + name, Namespace: "t", Name: name,
		Placement: podmodel.Placement{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: mem, Cores: 10}}}}}
}

// The pod asks one GPU of 10000 MiB at priority 100. On "full" both GPUs
// hold 9000 MiB of lower-priority pods in two slices each; on "high" one
// pod of priority 1000 fills each. kube-scheduler, blind to gpumem,
// proposes one CPU pod of its own as the victim on each.
func TestPreemptAddsWhatVgpudsRulesNeed(t *testing.T) {
	nodes := residentNodes{fakeNodes: fakeNodes{"full": gpuNode("full", 0, 0), "high": gpuNode("high", 0, 0)}, pods: map[string][]fit.Resident{
		"full": {booked("a1", "GPU-full-0", 6000), booked("a2", "GPU-full-0", 3000), booked("b1", "GPU-full-1", 8000), booked("b2", "GPU-full-1", 1000)},
		"high": {booked("h1", "GPU-high-0", 9000), booked("h2", "GPU-high-1", 9000)},
	}}
	prio := map[string]int32{"a1": 10, "a2": 10, "b1": 50, "b2": 10, "h1": 1000, "h2": 1000}
	lookup := func(ns, name string) *slimpod.Pod {
		if p, ok := prio[name]; ok {
			sp := &slimpod.Pod{Priority: p}
			sp.Namespace, sp.Name, sp.UID = ns, name, types.UID("uid-"+name)
			return sp
		}
		return nil
	}
	p := NewPlacer(nodes, nil, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), lookup, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := `{"metadata":{"name":"train","namespace":"ai","uid":"uid-train"},"spec":{"priority":100,"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]}}`
	body := fmt.Sprintf(`{"Pod":%s,"NodeNameToMetaVictims":{"full":{"Pods":[{"UID":"uid-cpu"}],"NumPDBViolations":1},"high":{"Pods":[{"UID":"uid-cpu2"}]},"gone":{"Pods":[]}}}`, pod)
	w := postTo(PreemptHandler(p), body)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	var res extenderv1.ExtenderPreemptionResult
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range res.NodeNameToMetaVictims["full"].Pods {
		got = append(got, v.UID)
	}
	slices.Sort(got)
	// a1 alone frees GPU-full-0 (16000 MiB, 9000 held), as b1 alone
	// frees GPU-full-1; a1's priority is the lower.
	if !slices.Equal(got, []string{"uid-a1", "uid-cpu"}) || res.NodeNameToMetaVictims["full"].NumPDBViolations != 1 {
		t.Errorf("full: victims %v; want kube-scheduler's uid-cpu and a1", got)
	}
	for _, node := range []string{"high", "gone"} {
		if v, ok := res.NodeNameToMetaVictims[node]; ok {
			t.Errorf("%s kept with victims %v: no preemption there lets the pod fit", node, v)
		}
	}
	if w := postTo(PreemptHandler(p), `{"NodeNameToMetaVictims":{}}`); w.Code != 400 {
		t.Errorf("no pod: %d %s", w.Code, w.Body)
	}
}

// The leader's own preemption picks the cheapest node of those
// kube-scheduler could use; while it holds that node for the pod, Filter
// refuses the node to pods not of higher priority.
func TestChooseThenHoldTheNode(t *testing.T) {
	nodes := residentNodes{fakeNodes: fakeNodes{"full": gpuNode("full", 0, 0), "other": gpuNode("other", 0), "out": gpuNode("out", 0)}, pods: map[string][]fit.Resident{
		"full":  {booked("a1", "GPU-full-0", 9000), booked("a2", "GPU-full-0", 3000), booked("b1", "GPU-full-1", 14000)},
		"other": {booked("o1", "GPU-other-0", 7000), booked("o2", "GPU-other-0", 7000)},
		"out":   {booked("x1", "GPU-out-0", 15000)},
	}}
	for name, n := range map[string]fit.Node{"full": nodes.fakeNodes["full"], "other": nodes.fakeNodes["other"], "out": nodes.fakeNodes["out"]} {
		// NodeFor shows the books' usage: the residents booked.
		for _, r := range nodes.pods[name] {
			fit.Add(&n, r.Placement)
		}
		nodes.fakeNodes[name] = n
	}
	bare := map[string]fit.Node{"full": gpuNode("full", 0, 0), "other": gpuNode("other", 0), "out": gpuNode("out", 0)}
	rn := bareResidents{residentNodes: nodes, bare: bare}
	prio := map[string]int32{"a1": 10, "a2": 10, "b1": 10, "o1": 5, "o2": 5, "x1": 0}
	lookup := func(ns, name string) *slimpod.Pod {
		p, ok := prio[name]
		if !ok {
			return nil
		}
		sp := &slimpod.Pod{Priority: p}
		sp.Namespace, sp.Name, sp.UID = ns, name, types.UID("uid-"+name)
		return sp
	}
	p := NewPlacer(rn, nil, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), lookup, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := &slimpod.Pod{Priority: 100, Containers: []podmodel.ContainerRequest{{Name: "main", GPUs: 1, HasGPUs: true, MemoryMiB: 14000}}}
	pod.Namespace, pod.Name, pod.UID = "ai", "train", "uid-train"
	got, ok, err := p.Choose(context.Background(), pod, names{"full", "other", "out"}, func(n string) bool { return n != "out" })
	if err != nil || !ok || got.Node != "full" || len(got.Victims) != 1 || got.Victims[0].Name != "b1" {
		t.Fatalf("Choose = %+v, %v, %v; want b1 on full (one victim; other needs two, out is not the pod's)", got, ok, err)
	}
	p.Nominate("full", pod)
	lower := &slimpod.Pod{Priority: 100, Containers: []podmodel.ContainerRequest{{Name: "main", GPUs: 1, HasGPUs: true, MemoryMiB: 100}}}
	lower.Namespace, lower.Name, lower.UID = "ai", "small", "uid-small"
	if _, failed, _ := p.Filter(context.Background(), lower, []string{"full"}); failed["full"] == "" {
		t.Error("a pod of the nominee's priority took the held node")
	}
	higher := *lower
	higher.Priority = 101
	if fits, _, _ := p.Filter(context.Background(), &higher, []string{"full"}); len(fits) != 1 {
		t.Error("a pod of higher priority is kept from the held node")
	}
	p.Unnominate(pod.UID)
	if fits, _, _ := p.Filter(context.Background(), lower, []string{"full"}); len(fits) != 1 {
		t.Error("the node is still held once let go")
	}
}

type names []string

func (n names) NodeNames() []string { return n }

// bareResidents answers Residents with the bare nodes.
type bareResidents struct {
	residentNodes
	bare map[string]fit.Node
}

func (b bareResidents) Residents(name string) (fit.Node, []fit.Resident, *fit.Reason) {
	n, ok := b.bare[name]
	if !ok {
		return fit.Node{}, nil, &fit.Reason{Kind: "gone"}
	}
	return n, slices.Clone(b.pods[name]), nil
}
