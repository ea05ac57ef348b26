package nodepods

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// unstreamed is the fake's core client saying, as the fake clientset
// itself does, that it cannot stream an informer's initial list.
type unstreamed struct{ corev1client.CoreV1Interface }

func (unstreamed) IsWatchListSemanticsUnSupported() bool { return true }

func pod(name, node string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Annotations:   map[string]string{wellknown.AnnotationPhase: string(protocol.PhaseBound)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "proxy", RestartPolicy: &always, Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Env: []corev1.EnvVar{{Name: "B", Value: "2"}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
			Volumes: []corev1.Volume{{Name: "data"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled}}},
	}
}

// The cache holds the node's pods trimmed to what Allocate and inspect
// read, and wakes waiters on every change.
func TestCacheTrimsAndSignalsChanges(t *testing.T) {
	kube := fake.NewClientset(pod("a", "n1"))
	c, err := New(unstreamed{kube.CoreV1()}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Start(ctx)
	if !c.WaitForSync(ctx) {
		t.Fatal("no sync")
	}
	got := c.List()
	if len(got) != 1 {
		t.Fatalf("listed %d pods", len(got))
	}
	p := got[0]
	switch {
	case p.UID != "uid-a" || p.Annotations[wellknown.AnnotationPhase] != string(protocol.PhaseBound) || p.Spec.NodeName != "n1":
		t.Errorf("identity, annotations or node lost: %+v", p.ObjectMeta)
	case len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].RestartPolicy == nil || podmodel.KindOf(&p.Spec.InitContainers[0], true) != podmodel.KindSidecar:
		t.Errorf("sidecar lost: %+v", p.Spec.InitContainers)
	case p.Spec.Containers[0].Resources.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 1:
		t.Errorf("resources lost: %+v", p.Spec.Containers[0])
	case p.Spec.Containers[0].Env != nil || p.Spec.Containers[0].Image != "" || p.Spec.Volumes != nil || p.ManagedFields != nil || p.Status.Conditions != nil:
		t.Errorf("not trimmed: %+v", p)
	}

	changed := c.Changed()
	if _, err := kube.CoreV1().Pods("ns").Create(ctx, pod("b", "n1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("Changed not closed after a pod was added")
	}
}

// The phase patch names the pod's UID, so the apiserver refuses it for a
// pod deleted and recreated under the same name instead of marking the
// new one.
func TestSetPhaseCarriesTheUIDPrecondition(t *testing.T) {
	p := pod("a", "n1")
	kube := fake.NewClientset(p)
	var patch []byte
	kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.MergePatchType {
			t.Errorf("patch type %s, want a merge patch", pa.GetPatchType())
		}
		patch = pa.GetPatch()
		return false, nil, nil
	})
	w := NewPhaseWriter(kube.CoreV1())
	if err := w.SetPhase(context.Background(), p, protocol.PhaseAllocated); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Metadata struct {
			UID         types.UID         `json:"uid"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &body); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	if body.Metadata.UID != p.UID || body.Metadata.Annotations[wellknown.AnnotationPhase] != string(protocol.PhaseAllocated) {
		t.Fatalf("patch %s: want uid %s and phase allocated", patch, p.UID)
	}
	got, err := kube.CoreV1().Pods("ns").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil || got.Annotations[wellknown.AnnotationPhase] != string(protocol.PhaseAllocated) {
		t.Fatalf("phase not written: %v %v", got.Annotations, err)
	}
	// A missing pod is an error that names it.
	gone := pod("gone", "n1")
	if err := w.SetPhase(context.Background(), gone, protocol.PhaseAllocated); err == nil {
		t.Fatal("SetPhase on a missing pod succeeded")
	}
}
