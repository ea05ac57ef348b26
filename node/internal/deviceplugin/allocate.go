package deviceplugin

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
)

// phaseWriteTimeout bounds the API write Allocate waits for; a slower
// write is retried in the background so kubelet is not held up.
const phaseWriteTimeout = 5 * time.Second

// Allocate answers for the container kubelet is admitting. Where the
// runtime names the pod (RuntimeNamesPods) it picks no pod and answers
// only kubelet's device bookkeeping. Otherwise it guesses the one pod bound here and waiting; an
// Allocate it cannot tie to exactly one container fails with a message
// naming the node, the device count and the pods considered, which
// kubelet shows on the pod.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	start := p.clock.Now()
	p.lockAlloc()
	defer p.unlockAlloc()
	resp := &pluginapi.AllocateResponse{}
	if p.opts.RuntimeNamesPods {
		for range req.ContainerRequests {
			resp.ContainerResponses = append(resp.ContainerResponses, bookkeepingResponse())
		}
		p.obs.Allocated(true, p.clock.Since(start))
		return resp, nil
	}
	for _, cr := range req.ContainerRequests {
		r, err := p.allocateContainer(ctx, cr.DevicesIds)
		if err != nil {
			p.log.Warn("Allocate refused", "err", err)
			p.obs.Allocated(false, p.clock.Since(start))
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	p.obs.Allocated(true, p.clock.Since(start))
	return resp, nil
}

func (p *Plugin) allocateContainer(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	t, err := p.waitForTarget(ctx, ids)
	if err == nil {
		err = checkCount(p.opts.Node, t, ids)
	}
	if err == nil {
		err = checkSlices(p.opts.Node, t, p.gpus)
	}
	var r *pluginapi.ContainerAllocateResponse
	if err == nil {
		r, err = containerResponse(t, p.opts.Resources, grant.Shape{Oversubscribe: p.opts.Oversubscribe, Interposer: p.opts.Interposer})
		if err != nil {
			err = &resolveError{pod: t.pod, msg: "node " + p.opts.Node + ": " + err.Error()}
		}
	}
	if err != nil {
		var re *resolveError
		if errors.As(err, &re) && re.pod != nil {
			p.finish(ctx, re.pod, protocol.Failed(re.msg))
		}
		return nil, err
	}
	pr := p.progressOf(t.pod.UID)
	pr.done[t.container.Name] = true
	p.log.Info("allocated", "pod", t.pod.Namespace+"/"+t.pod.Name, "container", t.container.Name, "gpus", r.Envs[containerenv.EnvVisibleDevices])
	if t.last {
		p.finish(ctx, t.pod, protocol.PhaseAllocated)
	}
	return r, nil
}

// waitForTarget resolves ids, waiting up to ResolveWait for the informer
// to show a bound pod when none is bound yet.
func (p *Plugin) waitForTarget(ctx context.Context, ids []string) (target, error) {
	deadline := p.clock.NewTimer(p.opts.ResolveWait)
	defer deadline.Stop()
	askedFresh := false
	for {
		changed := p.pods.Changed()
		pods := p.pods.List()
		p.prune(pods)
		t, err := resolve(p.opts.Node, pods, p.progress, ids)
		var re *resolveError
		if err == nil || !errors.As(err, &re) || !re.wait {
			return t, err
		}
		// One fresh read per call: a failed one means another pod may be
		// the one kubelet admits, which the informer will show.
		if re.dying != nil && !askedFresh {
			askedFresh = true
			if p.servesDying(ctx, *re.dying, ids) {
				return *re.dying, nil
			}
		}
		select {
		case <-changed:
		case <-deadline.C():
			return t, err
		case <-ctx.Done():
			return t, err
		}
	}
}

// finish records the pod's final phase here at once, and in the API.
func (p *Plugin) finish(ctx context.Context, pod *corev1.Pod, phase protocol.Phase) {
	p.progressOf(pod.UID).final = phase
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), phaseWriteTimeout)
	defer cancel()
	err := p.phases.SetPhase(wctx, pod, phase)
	if err == nil || gone(err) {
		return
	}
	p.log.Warn("recording the pod's phase failed; retrying in the background", "pod", pod.Namespace+"/"+pod.Name, "phase", phase, "err", err)
	go p.retryPhase(pod, phase)
}

func (p *Plugin) retryPhase(pod *corev1.Pod, phase protocol.Phase) {
	for wait := time.Second; wait <= 32*time.Second; wait *= 2 {
		<-p.clock.After(wait)
		ctx, cancel := context.WithTimeout(context.Background(), phaseWriteTimeout)
		err := p.phases.SetPhase(ctx, pod, phase)
		cancel()
		if err == nil || gone(err) {
			return
		}
		p.log.Warn("recording the pod's phase failed", "pod", pod.Namespace+"/"+pod.Name, "phase", phase, "err", err)
	}
	p.log.Error("gave up recording the pod's phase; the leader will not bind more pods to this node until it is set", "pod", pod.Namespace+"/"+pod.Name, "phase", phase)
}

// gone reports a phase write that can never land: the pod was deleted, or
// its name now belongs to another pod (the write's UID precondition).
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

func (p *Plugin) progressOf(uid types.UID) *progress {
	pr := p.progress[uid]
	if pr == nil {
		pr = &progress{done: map[string]bool{}}
		p.progress[uid] = pr
	}
	return pr
}

// prune forgets pods that left the node.
func (p *Plugin) prune(pods []*corev1.Pod) {
	if len(p.progress) == 0 {
		return
	}
	live := make(map[types.UID]bool, len(pods))
	for _, pod := range pods {
		live[pod.UID] = true
	}
	for uid := range p.progress {
		if !live[uid] {
			delete(p.progress, uid)
		}
	}
}
