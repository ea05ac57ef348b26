package watches

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/quota"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// unstreamed is the fake's core client saying, as the fake clientset
// itself does, that it cannot stream an informer's initial list.
type unstreamed struct{ corev1client.CoreV1Interface }

func (unstreamed) IsWatchListSemanticsUnSupported() bool { return true }

// unstreamedClaims is the same for the fake's claims.
type unstreamedClaims struct {
	resourcev1client.ResourceClaimsGetter
}

func (unstreamedClaims) IsWatchListSemanticsUnSupported() bool { return true }

// assignedPod is a pod bound to node with a 1000 MiB assignment there.
func assignedPod(name, node string) *corev1.Pod {
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: node, Containers: []protocol.ContainerAssignment{{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 1000}}}}})
	if err != nil {
		panic(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "7",
			Annotations: map[string]string{wellknown.AnnotationAssignment: raw, wellknown.AnnotationPhase: string(protocol.PhaseBound)}},
		Spec:   corev1.PodSpec{SchedulerName: "vgpud-scheduler", NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// The leader's informers list and watch through the typed client, keep
// pods and nodes as the transform makes them, and index by namespace for
// the pod store and the quota lister; stop returns once they have.
func TestInformersFeedTheStores(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	kube := fake.NewClientset(
		assignedPod("a", "n1"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}}}},
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("4000")}}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Labels: map[string]string{"big": "label"}},
			Status: resourceapi.ResourceClaimStatus{ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "a"}}}},
	)
	inf, err := New(unstreamed{kube.CoreV1()}, unstreamedClaims{kube.ResourceV1()}, books.Transform(names))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	inf.Start(ctx)
	if err := inf.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// A pod created after the list arrives through the watch.
	if _, err := kube.CoreV1().Pods("ns").Create(ctx, assignedPod("b", "n1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := slimpod.NewStore(inf.Pods)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return store.Get("ns", "b") != nil, nil }); err != nil {
		t.Fatalf("pod b did not arrive through the watch: %v", err)
	}
	if got := len(store.List("ns")); got != 2 {
		t.Fatalf("pods in ns: %d, want 2", got)
	}
	n, _, err := inf.Nodes.GetStore().GetByKey("n1")
	if err != nil || n == nil {
		t.Fatalf("node n1: %v %v", n, err)
	}
	if node := n.(*corev1.Node); node.ManagedFields != nil || node.Status.Conditions != nil {
		t.Fatalf("node not trimmed: %+v", node)
	}
	// Claims keep their requests alone.
	c, _, err := inf.Claims.GetStore().GetByKey("ns/c")
	if err != nil || c == nil {
		t.Fatalf("claim ns/c: %v %v", c, err)
	}
	if claim := c.(*resourceapi.ResourceClaim); claim.Labels != nil || claim.Status.ReservedFor != nil {
		t.Fatalf("claim not trimmed: %+v", claim)
	}
	if q := quota.New(inf.Pods, inf.Quotas, names).NamespaceLimits("ns"); !q.Memory.Set || q.Memory.Hard != 4000 {
		t.Fatalf("quota limits of ns: %+v", q)
	}
	cancel()
	done := make(chan struct{})
	go func() { inf.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("informers still running 5 s after their context ended")
	}
}
