package books

import (
	"testing"

	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// On a node where the runtime names each container's pod, a bind books
// its pod as the Binding's echo will show it, not in flight (no phase is
// written there), so the echo changes nothing. Should the node stop
// being one before the Binding lands, the pod holds the node's in-flight
// slot all the same.
func TestBookingOnANodeThatNamesPods(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	exact := gpuNode("n1", 2, "80")
	exact.Annotations[wellknown.AnnotationIdentity] = wellknown.IdentityRuntime
	c.SetNode(exact)
	book := func(name string) *slimpod.Pod {
		t.Helper()
		p := assigned(name, "n1", 0, 1000)
		p.Spec.NodeName = ""
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil {
			t.Fatal(err)
		}
		r := record(p)
		if _, ok := c.Book(r, a, p.Annotations[wellknown.AnnotationAssignment], 0); !ok {
			t.Fatalf("%s not booked", name)
		}
		return r
	}
	p := book("a")
	c.MarkBound(p.UID, "n1")
	echo := assigned("a", "n1", 0, 1000) // bound, no phase, pending
	if !c.unchanged(record(echo), echo.Annotations[wellknown.AnnotationAssignment], inFlightOf(record(echo))) {
		t.Error("the Binding's echo on a node that names pods changed the booking")
	}
	// The node stops naming pods between a bind's booking and its
	// Binding: the pod is in flight once bound.
	q := book("b")
	c.SetNode(gpuNode("n1", 2, "80"))
	c.MarkBound(q.UID, "n1")
	if busy := c.InFlight("n1", ""); busy != "ns/b" {
		t.Errorf("in flight on the node that no longer names pods: %q; want ns/b", busy)
	}
}
