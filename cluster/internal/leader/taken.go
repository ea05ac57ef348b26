package leader

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
)

// EventsTo makes every change of the Lease's holder, and a Lease taken
// out of turn, also an Event on the Lease, where `kubectl get events -n
// <namespace>` shows it. Call before Run.
func (e *Elector) EventsTo(api eventsv1client.EventsGetter) { e.events = api }

// postTaken records the Event of a Lease taken out of turn.
func (e *Elector) postTaken(by string) {
	e.postEvent(corev1.EventTypeWarning, "LeaseTakenOutOfTurn", fmt.Sprintf("%s took the leader Lease while %s's hold was still current: no replica does that in turn; the node running %s may be compromised",
		by, e.cfg.Identity, by))
}

// postEvent records an Event on the Lease; best effort, with its own
// deadline.
func (e *Elector) postEvent(kind, reason, note string) {
	if e.events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := e.clock.Now()
	ev := &eventsv1.Event{
		// Named as client-go's recorders name Events: a generateName may
		// not end in a dot, which the apiserver checks for Events.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", e.cfg.LeaseName, now.UnixNano()), Namespace: e.cfg.LeaseNamespace},
		EventTime:  metav1.NewMicroTime(now),
		Regarding: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: e.cfg.LeaseNamespace, Name: e.cfg.LeaseName},
		Type: kind, Reason: reason, Action: "Electing",
		ReportingController: "vgpud", ReportingInstance: e.cfg.Identity,
		Note: note,
	}
	if _, err := e.events.Events(e.cfg.LeaseNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		e.log.Warn("record an Event on the Lease", "reason", reason, "err", err)
	}
}
