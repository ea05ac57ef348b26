package extender

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// vgpud writes an assignment only in a Binding, which sets the node with
// it, so whatever a bind meets (a refusal, a conflict, a Binding that got
// no answer and landed or not, the Lease lost, the quota full, no room)
// no pod is left with an assignment and no node. That is why nothing
// sweeps such assignments, and why bind refuses a pod that carries one.
func TestNoBindOutcomeLeavesAnAssignmentWithoutANode(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(e *bindEnv)
		want string // in the bind's answer; "" binds
	}{
		{"bound", func(*bindEnv) {}, ""},
		{"the pod changed under the bind", func(e *bindEnv) {
			e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "p1", nil)
			})
		}, "changed since vgpud read it"},
		{"a Binding refused", func(e *bindEnv) {
			e.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				return true, nil, apierrors.NewForbidden(corev1.Resource("pods/binding"), "p1", nil)
			})
		}, "forbidden"},
		{"a Binding unanswered that never lands", func(e *bindEnv) { e.unanswerBinding(time.Hour, nil) }, "may still land"},
		{"a Binding unanswered that lands", func(e *bindEnv) {
			e.unanswerBinding(time.Hour, func(b *corev1.Binding) { e.landing = b })
		}, "may still land"},
		{"the Lease lost", func(e *bindEnv) { e.fences.Store(0) }, "does not hold the leader Lease"},
		{"the quota full", func(e *bindEnv) {
			e.limits["ai"] = podmodel.Quota{Memory: podmodel.Limit{Set: true, Hard: 1000}}
		}, "quota"},
		{"no room", func(e *bindEnv) {
			if _, ok := e.books.Book(recordOf(bindPod("big", "16000")), protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{
				{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 16000}}}}}, "", 0); !ok {
				t.Fatal("could not fill the node")
			}
		}, "no longer fits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBindEnv(t, 10, 50*time.Millisecond, bindPod("p1", "4000"))
			tc.set(e)
			msg := e.bind("p1")
			if tc.want == "" && msg != "" || !strings.Contains(msg, tc.want) {
				t.Fatalf("bind: %q, want %q", msg, tc.want)
			}
			if e.landing != nil {
				e.land(t, e.landing)
			}
			for _, a := range e.kube.Actions() {
				if a.GetResource().Resource != "pods" || a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
					continue
				}
				if a.GetSubresource() != "binding" {
					t.Errorf("a pod write other than a Binding: %s %s", a.GetVerb(), a.GetSubresource())
				}
			}
			pods, err := e.kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if _, ok := p.Annotations[wellknown.AnnotationAssignment]; ok && p.Spec.NodeName == "" {
					t.Errorf("pod %s has an assignment and no node", p.Name)
				}
			}
		})
	}
}
