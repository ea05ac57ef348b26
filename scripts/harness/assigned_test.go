package harness

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestAssignedUseSumsLivePodsPerGPU(t *testing.T) {
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{
		{Name: "a", GPUs: []protocol.GPUSlice{{UUID: "G0", MemoryMiB: 1000, Cores: 10}, {UUID: "G1", MemoryMiB: 500}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name string, phase corev1.PodPhase, assignment string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{wellknown.AnnotationAssignment: assignment}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	pods := []corev1.Pod{
		pod("run", corev1.PodRunning, raw),
		pod("pending", corev1.PodPending, raw),
		pod("done", corev1.PodSucceeded, raw),
		pod("bad", corev1.PodRunning, "{"),
		{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns"}},
	}
	used, live, errs := AssignedUse(pods)
	if got := *used["G0"]; got != (GPUUse{MemMiB: 2000, Cores: 20, Slices: 2}) {
		t.Errorf("G0 %+v", got)
	}
	if got := *used["G1"]; got != (GPUUse{MemMiB: 1000, Slices: 2}) {
		t.Errorf("G1 %+v", got)
	}
	if len(live) != 2 || live[0].Pod.Name != "run" || live[1].Assignment.Node != "n1" {
		t.Errorf("live %+v", live)
	}
	if len(errs) != 1 || errs[0].Error()[:6] != "ns/bad" {
		t.Errorf("errors %v, want one naming ns/bad", errs)
	}
}
