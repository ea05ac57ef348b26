package deviceplugin

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// freshReadTimeout bounds servesDying's read of the node's pods.
const freshReadTimeout = 5 * time.Second

// servesDying decides the one case the informer alone cannot: no live pod
// is bound here and waiting, but one being deleted is. kubelet still
// admits a pod deleted after it arrived there; refusing it fails a pod
// nobody will run, with an error on it, and holds up the node's
// admissions for ResolveWait. Serving it is safe only if kubelet can be
// admitting no other pod, for a pod pinned by nodeName must never get a
// dying pod's GPUs: a fresh read of the node's pods from the API, which
// shows every pod kubelet can know of, must show the dying pod still bound
// and waiting, and no other unfinished pod asking for GPUs that vgpud has
// not allocated.
func (p *Plugin) servesDying(ctx context.Context, t target, ids []string) bool {
	if !podOwns(t.assignment, ids) {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, freshReadTimeout)
	defer cancel()
	pods, err := p.pods.Fresh(rctx)
	if err != nil {
		p.log.Warn("could not read this node's pods to serve a pod being deleted", "pod", t.pod.Namespace+"/"+t.pod.Name, "err", err)
		return false
	}
	found := false
	for _, q := range pods {
		if q.UID == t.pod.UID {
			_, why := candidate(p.opts.Node, q, p.progress[q.UID])
			found = why == whyTerminating
			continue
		}
		if p.awaitsGPUs(q) {
			p.log.Info("not serving a pod being deleted: another pod may be the one kubelet admits",
				"pod", t.pod.Namespace+"/"+t.pod.Name, "other", q.Namespace+"/"+q.Name)
			return false
		}
	}
	if found {
		p.log.Info("serving a pod being deleted: it is the only pod here waiting for GPUs", "pod", t.pod.Namespace+"/"+t.pod.Name)
	}
	return found
}

// awaitsGPUs reports whether kubelet may yet admit q asking for vgpud's
// GPUs: it is unfinished, asks for them, and vgpud has not recorded an
// outcome of its Allocate.
func (p *Plugin) awaitsGPUs(q *corev1.Pod) bool {
	if q.Status.Phase == corev1.PodSucceeded || q.Status.Phase == corev1.PodFailed {
		return false
	}
	if pr := p.progress[q.UID]; pr != nil && pr.final != "" {
		return false
	}
	phase := protocol.Phase(q.Annotations[wellknown.AnnotationPhase])
	if _, failed := phase.IsFailed(); failed || phase == protocol.PhaseAllocated {
		return false
	}
	return podmodel.NeedsDevices(q, p.opts.Resources)
}
