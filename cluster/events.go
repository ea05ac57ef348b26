package cluster

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// eventSink records pod Events from component vgpud.
type eventSink struct {
	warn     func(pod *corev1.Pod, reason, message string)
	normal   func(pod *corev1.Pod, reason, message string)
	shutdown func()
}

// podEvents starts the Event broadcaster; call shutdown to flush and stop it.
func podEvents(kube kubernetes.Interface) eventSink {
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	rec := bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vgpud"})
	return eventSink{
		warn:     func(p *corev1.Pod, reason, msg string) { rec.Event(p, corev1.EventTypeWarning, reason, msg) },
		normal:   func(p *corev1.Pod, reason, msg string) { rec.Event(p, corev1.EventTypeNormal, reason, msg) },
		shutdown: bc.Shutdown,
	}
}
