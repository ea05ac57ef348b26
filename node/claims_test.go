package node

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A node moved to DRA taints the GPUs the extender's and HAMi's live
// pods hold on it, by vgpud's own assignment and HAMi's record: not an
// ended pod's, nor another node's; all of them for a record that does
// not read.
func TestExtenderBooked(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase, uuids ...string) *corev1.Pod {
		a := protocol.Assignment{Version: protocol.Version, Node: node}
		for i, u := range uuids {
			a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: fmt.Sprint("c", i), GPUs: []protocol.GPUSlice{{UUID: u, MemoryMiB: 1000, Cores: 10}}})
		}
		raw, err := protocol.EncodeAssignment(a)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{wellknown.AnnotationAssignment: raw}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	hami := func(name, record string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{hamirecord.AnnotationHAMiAllocated: record, hamirecord.AnnotationHAMiNode: "n1"}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	inv := protocol.Inventory{GPUs: []protocol.GPU{{UUID: "GPU-0"}, {UUID: "GPU-1"}, {UUID: "GPU-5"}},
		MIG: []protocol.MIGGPU{{UUID: "GPU-m", Instances: []protocol.MIGInstance{{UUID: "MIG-m1"}, {UUID: "MIG-m2"}}}}}
	live := []*corev1.Pod{
		pod("a", "n1", corev1.PodRunning, "GPU-0"),
		pod("b", "n1", corev1.PodPending, "GPU-1", "MIG-1"),
		pod("done", "n1", corev1.PodSucceeded, "GPU-2"),
		pod("elsewhere", "n2", corev1.PodRunning, "GPU-3"),
		hami("hami", "GPU-5,NVIDIA,1000,10:;GPU-m[1g.10gb-0],NVIDIA,9856,0:;"),
		{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}, Spec: corev1.PodSpec{NodeName: "n1"}},
	}
	if got := extenderBooked(live, "n1", inv); fmt.Sprint(got) != "map[GPU-0:true GPU-1:true GPU-5:true GPU-m:true MIG-1:true MIG-m1:true MIG-m2:true]" {
		t.Errorf("booked %v; want GPU-0, GPU-1, MIG-1, and HAMi's GPU-5 and GPU-m's instances", got)
	}
	// What it holds is unknown where a record does not read: every GPU.
	bad := pod("bad", "n1", corev1.PodRunning, "GPU-x")
	bad.Annotations[wellknown.AnnotationAssignment] = "{"
	for _, p := range []*corev1.Pod{bad, hami("bad-hami", "GPU-5,NVIDIA,lots,10")} {
		if got := extenderBooked([]*corev1.Pod{p}, "n1", inv); len(got) != 5 {
			t.Errorf("%s: booked %v; want every GPU and instance", p.Name, got)
		}
	}
}
