package extender

import (
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/vgpud/vgpud/cluster/pods"
)

// DefaultUnansweredHold is how long a Binding that got no answer may
// still land: kube-apiserver's default --request-timeout (1 minute), and
// a margin.
const DefaultUnansweredHold = 70 * time.Second

// errUnanswered marks a bind whose Binding got no answer: it may yet
// land, so its booking is held (settle), not taken back.
var errUnanswered = errors.New("the Binding got no answer and may still land")

// unanswered reports whether a failed Binding may have been written all
// the same: the apiserver did not say it refused it. A 4xx status is a
// refusal (conflict, not found, forbidden, invalid, too many requests);
// a 5xx one (a timeout, "may still be processing the request") and any
// error without a status (the connection, a deadline) are not.
func unanswered(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= 500
	}
	return true
}

// settle decides, once a Binding that got no answer can no longer land,
// what it did. Until then its booking stays, and stays in flight (bind
// marked it bound): giving the room back early could let a second pod
// into it, and binding a second pod to the node before kubelet's
// Allocate could hand that one these GPUs. If the pod is bound with this
// assignment by then, the booking is the pod's (its echo showed it, or
// will); otherwise it is taken back. Release leaves a booking an event
// has shown alone, so a read that fails cannot undo a bind that landed.
func (b *Binder) settle(pod *pods.Pod, node, raw string, token uint64) {
	time.Sleep(b.cfg.Unanswered)
	if b.boundAnyway(pod, node, raw) {
		return
	}
	b.books.Release(pod.UID, token)
	b.log.Info("an unanswered Binding did not land; its booking is taken back", "pod", pod.Namespace+"/"+pod.Name, "node", node)
}
