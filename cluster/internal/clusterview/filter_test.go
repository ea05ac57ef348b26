package clusterview

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// -n shows a namespace's pods, the GPUs they hold (with what the whole
// node booked there) and its quota; --node one node's GPUs and no quota.
func TestFilter(t *testing.T) {
	const sched = "vgpud-scheduler"
	on := func(node string, c protocol.ContainerAssignment) protocol.Assignment {
		return protocol.Assignment{Version: protocol.Version, Node: node, Containers: []protocol.ContainerAssignment{c}}
	}
	b := a100(2)
	b.UUID = "GPU-b0"
	nodes := []corev1.Node{node(t, "n1", a100(0), a100(1)), node(t, "n2", b)}
	pods := []corev1.Pod{
		pod(t, "ai", "small", sched, "n1", on("n1", slice("GPU-a0", 4000, 30)), corev1.PodRunning),
		pod(t, "ml", "beside", sched, "n1", on("n1", slice("GPU-a0", 2000, 10)), corev1.PodRunning),
		pod(t, "ml", "whole", sched, "n1", on("n1", slice("GPU-a1", 1, 100)), corev1.PodRunning),
		pod(t, "ml", "far", sched, "n2", on("n2", slice("GPU-b0", 1000, 10)), corev1.PodRunning),
		pod(t, "ai", "forged", "default-scheduler", "n2", on("n2", slice("GPU-b0", 1, 0)), corev1.PodRunning),
	}
	all := Build(nodes, pods, nil, sched, wellknown.DefaultResourceNames(), time.Now())

	ai := Filter(all, "ai", "")
	if len(ai.Nodes) != 1 || len(ai.Nodes[0].GPUs) != 1 {
		t.Fatalf("-n ai: nodes %+v", ai.Nodes)
	}
	if g := ai.Nodes[0].GPUs[0]; g.UUID != "GPU-a0" || strings.Join(g.Pods, ",") != "ai/small" || g.MemoryUsedMiB != 6000 {
		t.Errorf("-n ai: GPU %+v; want GPU-a0 with ai/small only, and the 6000 MiB every namespace booked there", g)
	}
	if len(ai.Namespaces) != 1 || ai.Namespaces[0].Name != "ai" || len(ai.Problems) != 1 || !strings.Contains(ai.Problems[0], "pod ai/forged") {
		t.Errorf("-n ai: namespaces %+v, problems %q", ai.Namespaces, ai.Problems)
	}
	if len(all.Nodes) != 2 || len(all.Nodes[0].GPUs[0].Pods) != 2 {
		t.Errorf("Filter changed the view it was given: %+v", all.Nodes)
	}

	n2 := Filter(all, "", "n2")
	if len(n2.Nodes) != 1 || n2.Nodes[0].Name != "n2" || n2.Namespaces != nil {
		t.Fatalf("--node n2: nodes %+v, namespaces %+v", n2.Nodes, n2.Namespaces)
	}
	var out bytes.Buffer
	if err := Render(&out, n2, true); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "GPU-b0") || !strings.Contains(s, "runtime") || strings.Contains(s, "NAMESPACE") || strings.Contains(s, "n1") {
		t.Errorf("--node n2 -o wide:\n%s", s)
	}

	none := Filter(all, "idle", "")
	out.Reset()
	if err := Render(&out, none, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no GPU holds a pod of namespace idle") {
		t.Errorf("-n idle:\n%s", out.String())
	}
}
