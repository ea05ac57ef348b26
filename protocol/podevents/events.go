// Package podevents records Events about pods (events.k8s.io/v1) for
// both roles, through one client-go broadcaster per role.
package podevents

import (
	"context"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
)

// Sink records pod Events from controller vgpud. client-go's events
// broadcaster posts each Event from its own goroutine, as kube-scheduler's
// do; core/v1's recorder posts them one at a time and drops them when
// many come at once (bench/runs.md).
type Sink struct {
	rec events.EventRecorder
	bc  events.EventBroadcaster
}

// Start starts the Event broadcaster until ctx ends; call Shutdown to
// stop it sooner.
func Start(ctx context.Context, api eventsv1client.EventsV1Interface) (Sink, error) {
	bc := events.NewBroadcaster(&events.EventSinkImpl{Interface: api})
	if err := bc.StartRecordingToSinkWithContext(ctx); err != nil {
		return Sink{}, fmt.Errorf("start recording Events: %w", err)
	}
	return Sink{rec: bc.NewRecorder(scheme.Scheme, "vgpud"), bc: bc}, nil
}

// As returns a recorder of eventType Events for action (what vgpud was
// doing with the pod: Binding, Scheduling, Checking).
func (s Sink) As(eventType, action string) func(pod *corev1.Pod, reason, message string) {
	about := s.About(eventType, action)
	return func(p *corev1.Pod, reason, msg string) { about(p, reason, msg) }
}

// About is As for any object, such as the node whose GPUs changed. A
// Sink that did not start records nothing.
func (s Sink) About(eventType, action string) func(obj runtime.Object, reason, message string) {
	return func(obj runtime.Object, reason, msg string) {
		if s.rec != nil {
			s.rec.Eventf(obj, nil, eventType, reason, action, "%s", truncate(msg, maxNote))
		}
	}
}

// Shutdown stops the broadcaster.
func (s Sink) Shutdown() {
	if s.bc != nil {
		s.bc.Shutdown()
	}
}

// maxNote is the longest note events.k8s.io/v1 accepts; a longer one is
// refused and the Event lost.
const maxNote = 1024

// truncate cuts msg to at most n bytes on a UTF-8 boundary, marking the cut.
func truncate(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	const more = " ..."
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}
