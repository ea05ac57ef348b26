package slimpod

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestOfUnreadableRequestsKeepsKindsAndSaysWhy(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ai", Annotations: map[string]string{"team": "x", wellknown.AnnotationPhase: "bound", wellknown.AnnotationUseGPUType: "A100"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("0.5")}}}},
		},
	}
	r := Of(p, wellknown.DefaultResourceNames())
	if r.Invalid == nil || !strings.Contains(r.Invalid.Error(), `container "c": nvidia.com/gpumem`) {
		t.Fatalf("Invalid = %v", r.Invalid)
	}
	if !r.Wants {
		t.Error("an unreadable vGPU resource is still wanted")
	}
	want := map[string]podmodel.ContainerKind{"side": podmodel.KindSidecar, "c": podmodel.KindApp}
	if got := r.Kinds(); !reflect.DeepEqual(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	if _, err := r.Usage(); err == nil {
		t.Error("usage of unreadable requests must fail")
	}
	if len(r.Annotations) != 1 || r.AssignmentPhase != "bound" || r.HasAssignment {
		t.Errorf("kept annotations %v, phase %q, assignment %v: want the selector, bound, none", r.Annotations, r.AssignmentPhase, r.HasAssignment)
	}
	c := r.DeepCopyObject().(*Pod)
	c.Annotations[wellknown.AnnotationUseGPUType] = "H100"
	c.Containers[0].Name = "x"
	if r.Annotations[wellknown.AnnotationUseGPUType] != "A100" || r.Containers[0].Name != "side" {
		t.Error("DeepCopyObject shares state with the original")
	}
}

// The record keeps only the annotations the leader reads, each at most
// just past the selector bound: a tenant's 256 KiB of annotations on each
// of many pods must not become the leader's memory.
func TestOfKeepsOnlyWhatTheLeaderReads(t *testing.T) {
	long := strings.Repeat("A100,", 50000)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ai", Annotations: map[string]string{
		"nvidia.com/padding": long, "vgpud.io/padding": long, "hami.io/padding": long,
		wellknown.AnnotationNoUseGPUType: long, wellknown.AnnotationGPUPolicyHAMi: "spread",
	}}}
	r := Of(p, wellknown.DefaultResourceNames())
	if len(r.Annotations) != 2 || r.Annotations[wellknown.AnnotationGPUPolicyHAMi] != "spread" {
		t.Fatalf("kept %d annotations: want the selector and the policy", len(r.Annotations))
	}
	if got := len(r.Annotations[wellknown.AnnotationNoUseGPUType]); got != podmodel.MaxSelectorBytes+1 {
		t.Fatalf("kept %d bytes of a long selector, want %d", got, podmodel.MaxSelectorBytes+1)
	}
	if _, err := podmodel.SelectorsOf(r.Annotations); err == nil {
		t.Fatal("a selector cut to the bound reads as valid")
	}
}

// The record stays within 256 bytes, a size class of its own: the
// leader keeps one per pod.
func TestPodRecordSize(t *testing.T) {
	if s := unsafe.Sizeof(Pod{}); s > 256 {
		t.Errorf("slimpod.Pod is %d bytes, over 256: keep the small fields last and the fields few", s)
	}
}
