package books

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// hamiPod is a running pod HAMi's scheduler placed, with its record.
func hamiPod(name, node, hamiNode, record string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Annotations: map[string]string{
			hamirecord.AnnotationHAMiAllocated: record, hamirecord.AnnotationHAMiNode: hamiNode}},
		Spec:   corev1.PodSpec{SchedulerName: "hami-scheduler", NodeName: node, Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// What HAMi placed is booked as its record says, on its node's GPUs, and
// counts in its namespace; it never holds the node's in-flight slot, and
// goes when the pod ends.
func TestHAMiRecordsAreBooked(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 2, "20"))
	p := hamiPod("old", "n1", "n1", "GPU-n1-0,NVIDIA,40000,100:;GPU-n1-1,NVIDIA,3000,30:;")
	pending := p.DeepCopy()
	pending.Status.Phase = corev1.PodPending
	if err := c.SetPod(record(pending)); err != nil {
		t.Fatal(err)
	}
	if busy := c.InFlight("n1", ""); busy != "" {
		t.Fatalf("a pod HAMi placed holds the in-flight slot: %s", busy)
	}
	n, r := c.Node("n1")
	if r != nil {
		t.Fatal(r)
	}
	if got := n.GPUs[0].Used; got != (podmodel.Usage{MemMiB: 40000, Cores: 100, Slots: 1, Exclusive: true}) {
		t.Fatalf("GPU 0: %+v", got)
	}
	if got := n.GPUs[1].Used; got != (podmodel.Usage{MemMiB: 3000, Cores: 30, Slots: 1}) {
		t.Fatalf("GPU 1: %+v", got)
	}
	if got, _ := c.NamespaceUsage("ns", ""); got.MemMiB != 43000 {
		t.Fatalf("namespace charged %+v, want 43000 MiB", got)
	}
	done := p.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	_ = c.SetPod(record(done))
	if n, _ = c.Node("n1"); n.GPUs[0].Used != (podmodel.Usage{}) || n.GPUs[1].Used != (podmodel.Usage{}) {
		t.Fatalf("a finished pod still holds GPUs: %+v", n.GPUs)
	}
}

// A record for another node, or of a pod HAMi never bound, books
// nothing; one that does not fit its node books more, not less: a slice
// on a GPU the node lacks is left out, one larger than its GPU holds all
// of it. vgpud's own assignment, where a pod has both, is what counts.
func TestHAMiRecordsBookWhatTheyCan(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 2, "20"))
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{hamiPod("moved", "n1", "n2", "GPU-n1-0,NVIDIA,1000,10:;"), "names node n2 but the pod is bound to n1"},
		{hamiPod("unbound", "", "n1", "GPU-n1-0,NVIDIA,1000,10:;"), "never bound the pod"},
		{hamiPod("garbled", "n1", "n1", "GPU-n1-0,NVIDIA,x,10:;"), "is not MiB"},
	} {
		err := c.SetPod(record(tc.pod))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.pod.Name, err, tc.want)
		}
	}
	if n, _ := c.Node("n1"); n.GPUs[0].Used != (podmodel.Usage{}) {
		t.Fatalf("refused records booked: %+v", n.GPUs[0].Used)
	}
	if err := c.SetPod(record(hamiPod("scaled", "n1", "n1", "GPU-elsewhere,NVIDIA,1000,10:GPU-n1-1,NVIDIA,90000,10:;"))); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Node("n1"); n.GPUs[1].Used != (podmodel.Usage{MemMiB: 40000, Cores: 10, Slots: 1}) {
		t.Fatalf("a slice larger than its GPU: %+v", n.GPUs[1].Used)
	}
	both := assigned("both", "n1", 0, 1000)
	both.Annotations[hamirecord.AnnotationHAMiAllocated] = "GPU-n1-0,NVIDIA,30000,10:;"
	both.Annotations[hamirecord.AnnotationHAMiNode] = "n1"
	if err := c.SetPod(record(both)); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Node("n1"); n.GPUs[0].Used.MemMiB != 1000 {
		t.Fatalf("a pod with vgpud's assignment booked by HAMi's record: %+v", n.GPUs[0].Used)
	}
}
