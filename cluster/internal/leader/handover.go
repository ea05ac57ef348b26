package leader

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

const (
	// handoverWait bounds how long a leader whose term ended (shutdown or
	// a lost Lease) waits for a successor to take the label; with no other
	// replica nobody comes, and this one campaigns again only after it.
	handoverWait = 8 * time.Second
	// handoverGrace is kept serving after the successor took the label:
	// the EndpointSlice and kube-proxy (1 s minimum sync) move the
	// Service's traffic over within it.
	handoverGrace = 2 * time.Second
	handoverPoll  = 100 * time.Millisecond
	// handoverRead bounds one read of this replica's pod: partitioned
	// from the apiserver, a read with no deadline hangs far past
	// handoverWait.
	handoverRead = time.Second
)

// handOver returns once a successor has taken the leader label from this
// replica's pod and the Service has had time to follow it, or after
// handoverWait; it then removes the label itself. The Lease is already
// released or lost (why): any other replica is campaigning. It returns at
// once if serving has already ended: the work returned, and the caller
// (campaign) removes the label.
func (e *Elector) handOver(serving context.Context, why string) {
	if serving.Err() != nil {
		return
	}
	start := e.clock.Now()
	e.log.Info("handing over: admission served until a successor takes the label", "why", why)
	tick := e.clock.NewTicker(handoverPoll)
	defer tick.Stop()
	deadline := e.clock.NewTimer(handoverWait)
	defer deadline.Stop()
	for {
		switch e.labelState(serving) {
		case podGone:
			return // a process run outside Kubernetes: no Service routes here
		case unlabelled:
			e.log.Info("successor took the leader label", "after", e.clock.Since(start).Round(time.Millisecond), "leader", e.Leader())
			select {
			case <-serving.Done():
			case <-e.clock.After(handoverGrace):
			}
			return
		}
		select {
		case <-serving.Done():
			return
		case <-deadline.C():
			e.log.Warn("no successor took the leader label; stopping admission anyway", "waited", handoverWait)
			e.dropLabel()
			return
		case <-tick.C():
		}
	}
}

type labelState int

const (
	stillLabelled labelState = iota // or unknown: the pod could not be read
	unlabelled
	podGone
)

func (e *Elector) labelState(ctx context.Context) labelState {
	ctx, cancel := context.WithTimeout(ctx, handoverRead)
	defer cancel()
	pod, err := e.pods.Pods(e.label.namespace).Get(ctx, e.label.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return podGone
	case err != nil:
		return stillLabelled
	case pod.Labels[wellknown.LabelRole] != wellknown.RoleLeader:
		return unlabelled
	}
	return stillLabelled
}
