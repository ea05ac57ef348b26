// Package requeue nudges the pods the extender refused lately when a GPU
// is freed, so that kube-scheduler tries them again at once.
package requeue

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// requeueWindow is how recent a refusal must be for a freed GPU to nudge
// its pod. The race it closes is milliseconds wide: kube-scheduler hears
// of a deleted pod and asks /filter again before the leader's informer has
// dropped that pod's booking, is refused, and parks the pod until another
// cluster event (on a quiet cluster, its 30 s flush).
const requeueWindow = 5 * time.Second

// maxNudges bounds the writes one freed booking may cause.
const maxNudges = 16

// Requeuer remembers the pods Filter refused lately and, when the books
// drop a booking, annotates those pods: an update to a pending pod that
// only an extender refused makes kube-scheduler try it again.
type Requeuer struct {
	api   corev1client.PodsGetter
	fence func() error
	clock clock.PassiveClock
	log   *slog.Logger

	mu      sync.Mutex
	recent  map[types.UID]refusal
	nudging bool // a round of patches is under way
	again   bool // and another booking dropped since it began
}

type refusal struct {
	namespace, name string
	at              time.Time
}

// New returns a Requeuer patching through api while fence says this
// replica leads.
func New(api corev1client.PodsGetter, fence func() error, clk clock.PassiveClock, log *slog.Logger) *Requeuer {
	return &Requeuer{api: api, fence: fence, clock: clk, log: log, recent: map[types.UID]refusal{}}
}

// Refused records that Filter found no node for p.
func (r *Requeuer) Refused(p *slimpod.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for uid, f := range r.recent {
		if now.Sub(f.at) > requeueWindow {
			delete(r.recent, uid)
		}
	}
	r.recent[p.UID] = refusal{namespace: p.Namespace, name: p.Name, at: now}
}

// Freed is the books' NotifyFreed hook: it must not block the informer,
// so the patches go out from a goroutine, one round at a time.
func (r *Requeuer) Freed(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) == 0 {
		return
	}
	if r.nudging {
		r.again = true
		return
	}
	r.nudging = true
	go r.nudge(ctx)
}

// take removes and returns the refusals still within the window.
func (r *Requeuer) take() map[types.UID]refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	out := map[types.UID]refusal{}
	for uid, f := range r.recent {
		delete(r.recent, uid)
		if now.Sub(f.at) <= requeueWindow && len(out) < maxNudges {
			out[uid] = f
		}
	}
	return out
}

func (r *Requeuer) nudge(ctx context.Context) {
	for {
		for uid, f := range r.take() {
			if err := r.patch(ctx, uid, f); err != nil {
				r.log.Debug("requeue nudge not written", "pod", f.namespace+"/"+f.name, "err", err)
			}
		}
		r.mu.Lock()
		if !r.again || ctx.Err() != nil {
			r.nudging = false
			r.mu.Unlock()
			return
		}
		r.again = false
		r.mu.Unlock()
	}
}

// patch annotates the pod, under its UID, if this replica still leads.
func (r *Requeuer) patch(ctx context.Context, uid types.UID, f refusal) error {
	if err := r.fence(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:%q}}}`, uid, wellknown.AnnotationRequeued, r.clock.Now().UTC().Format(time.RFC3339Nano))
	_, err := r.api.Pods(f.namespace).Patch(ctx, f.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
