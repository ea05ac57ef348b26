package extender

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// readTimeout bounds one read of a pod whose Binding went unanswered.
const readTimeout = 5 * time.Second

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

// Wait returns once nothing a bind left running is: each ends with the
// term. A bind that ends after Wait began starts nothing.
func (b *Binder) Wait() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.settling.Wait()
}

// startSettle runs settle unless Wait has begun: the term is over, and
// settle would end at once.
func (b *Binder) startSettle(settle func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.settling.Go(settle)
	}
}

// settle decides, once a Binding that got no answer can no longer land,
// what it did. Until then its booking stays, and stays in flight (bind
// marked it bound): giving the room back early could let a second pod
// into it, and binding a second pod to the node before kubelet's
// Allocate could hand that one these GPUs. If the pod is bound with this
// assignment by then, the booking is the pod's (its echo showed it, or
// will); if the pod is clearly not, it is taken back. A read that fails
// tells nothing, so it is read again until one answers: the apiserver
// that lost the answer may still be down, and the informer's echo with it.
// It ends with the term: the books it would correct go with it, and the
// next term rebuilds them from what the API shows.
func (b *Binder) settle(pod *slimpod.Pod, node, raw string, token uint64) {
	wait := b.cfg.UnansweredHold
	for {
		t := b.clock.NewTimer(wait)
		select {
		case <-b.term.Done():
			t.Stop()
			return
		case <-t.C():
		}
		landed, err := b.landed(b.term, pod, node, raw)
		if err == nil {
			if !landed {
				b.books.Release(pod.UID, token)
				b.log.Info("an unanswered Binding did not land; its booking is taken back", "pod", pod.Namespace+"/"+pod.Name, "node", node)
			}
			return
		}
		b.log.Warn("cannot tell yet whether an unanswered Binding landed; its booking stays", "pod", pod.Namespace+"/"+pod.Name, "node", node, "err", err)
		wait = min(2*wait, 30*time.Second)
	}
}

// landed reads the pod: whether it is bound to node with this
// assignment. An error means no answer (a pod gone is an answer: no).
func (b *Binder) landed(ctx context.Context, pod *slimpod.Pod, node, raw string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	got, err := b.api.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return got.UID == pod.UID && got.Spec.NodeName == node && got.Annotations[wellknown.AnnotationAssignment] == raw, nil
}
