package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
)

// eventSink records pod Events (events.k8s.io/v1) from controller vgpud.
// client-go's events broadcaster posts each Event from its own goroutine,
// as kube-scheduler's do; core/v1's recorder posts them one at a time and
// dropped most of them when binds ran at 150 a second (bench pipeline:
// 1517 of 5000 landed).
type eventSink struct {
	rec events.EventRecorder
	bc  events.EventBroadcaster
}

// podEvents starts the Event broadcaster until ctx ends; call shutdown to
// stop it sooner.
func podEvents(ctx context.Context, api eventsv1client.EventsV1Interface) (eventSink, error) {
	bc := events.NewBroadcaster(&events.EventSinkImpl{Interface: api})
	if err := bc.StartRecordingToSinkWithContext(ctx); err != nil {
		return eventSink{}, fmt.Errorf("start recording Events: %w", err)
	}
	return eventSink{rec: bc.NewRecorder(scheme.Scheme, "vgpud"), bc: bc}, nil
}

// as returns a recorder of eventType Events for action (what vgpud was
// doing with the pod: Binding, Scheduling, Clearing).
func (s eventSink) as(eventType, action string) func(pod *corev1.Pod, reason, message string) {
	return func(p *corev1.Pod, reason, msg string) { s.rec.Eventf(p, nil, eventType, reason, action, "%s", msg) }
}

func (s eventSink) shutdown() { s.bc.Shutdown() }
