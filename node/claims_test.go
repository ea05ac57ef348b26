package node

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A node moved to DRA taints the GPUs the extender's live pods hold on
// it, by vgpud's own assignment: not an ended pod's, another node's, or
// an assignment that does not read.
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
	bad := pod("bad", "n1", corev1.PodRunning, "GPU-x")
	bad.Annotations[wellknown.AnnotationAssignment] = "{"
	got := extenderBooked([]*corev1.Pod{
		pod("a", "n1", corev1.PodRunning, "GPU-0"),
		pod("b", "n1", corev1.PodPending, "GPU-1", "MIG-1"),
		pod("done", "n1", corev1.PodSucceeded, "GPU-2"),
		pod("elsewhere", "n2", corev1.PodRunning, "GPU-3"),
		bad,
		{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}, Spec: corev1.PodSpec{NodeName: "n1"}},
	}, "n1")
	if fmt.Sprint(got) != "map[GPU-0:true GPU-1:true MIG-1:true]" {
		t.Errorf("booked %v; want GPU-0, GPU-1 and MIG-1", got)
	}
}
