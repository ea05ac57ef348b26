package gpuuse

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/usage"
)

// recorder tells of each sample and kill: metrics, a log line and an
// Event on the pod.
type recorder struct {
	metrics Metrics
	pods    *nodepods.Index
	event   func(pod *corev1.Pod, reason, message string)
	mode    usage.Mode
	margin  int64
	// reported are the container/GPU pairs over their slice already told
	// in report mode: one Event while it stays over, not one a period.
	reported map[string]bool

	mu     sync.Mutex
	killed map[string]int // by container ID/GPU, for inspect
	log    interface {
		Info(string, ...any)
		Warn(string, ...any)
	}
}

func (r *recorder) Sampled(v usage.Outcome, took time.Duration) {
	r.metrics.Sampled(took)
	if r.mode != usage.Report {
		return
	}
	over := map[string]bool{}
	for _, u := range v.Uses {
		if !u.Over(uint64(r.margin)<<20) || !tellsPool(v.Uses, u) {
			continue
		}
		// One Event while a pool stays over, whichever holder is told.
		key := cmp.Or(u.Pool, u.Container.ID) + "/" + u.GPU
		over[key] = true
		if r.reported[key] {
			continue
		}
		msg := fmt.Sprintf("%s plus the node's margin of %d MiB; this node only reports (--gpu-usage=report), so nothing was killed", overSlice(u, "holds", "hold"), r.margin)
		r.log.Warn("container over its GPU memory slice", "pod", u.Container.Namespace+"/"+u.Container.Pod, "container", u.Container.Name, "gpu", u.GPU, "used_mib", u.UsedBytes>>20, "held_mib", u.Held()>>20, "slice_mib", u.LimitBytes>>20)
		r.tell(u.Container, "GPUMemoryOverSlice", msg)
	}
	r.reported = over
}

func (r *recorder) Killed(k usage.Kill, first bool, err error) {
	c, u := k.Use.Container, k.Use
	if err != nil {
		if errors.Is(err, usage.ErrMoved) {
			r.log.Info("process over its container's GPU memory had already ended", "pod", c.Namespace+"/"+c.Pod, "pid", k.Victim.PID)
		}
		return
	}
	r.metrics.Killed(k)
	r.mu.Lock()
	r.killed[c.ID+"/"+u.GPU]++
	r.mu.Unlock()
	victim := fmt.Sprintf("its largest process there (PID %d on the node, %d MiB)", k.Victim.PID, k.Victim.UsedBytes>>20)
	if u.Pool != "" {
		victim = fmt.Sprintf("the largest process of theirs there, this container's (PID %d on the node, %d MiB)", k.Victim.PID, k.Victim.UsedBytes>>20)
	}
	msg := fmt.Sprintf("%s plus the node's margin of %d MiB: vgpud killed %s", overSlice(u, "held", "held"), r.margin, victim)
	if k.Full {
		msg = fmt.Sprintf("%s, while the GPU was full (its processes held more than its memory less the node's reserve; the margin is room on a GPU that has room): vgpud killed %s", overSlice(u, "held", "held"), victim)
	}
	if first {
		msg += "; it was the container's first process, so the container restarts under the pod's restart policy"
	}
	r.log.Warn("killed a process over its container's GPU memory slice", "pod", c.Namespace+"/"+c.Pod, "container", c.Name, "gpu", u.GPU,
		"pid", k.Victim.PID, "used_mib", u.UsedBytes>>20, "held_mib", u.Held()>>20, "slice_mib", u.LimitBytes>>20, "claim", u.Claim, "first", first)
	r.tell(c, "GPUMemoryOverSlice", msg)
}

func (r *recorder) Ended(e usage.End, used uint64, processes int, err error) {
	var msg string
	switch e.Stage {
	case usage.EndedContainer:
		msg = fmt.Sprintf("container %q held %d MiB on GPU %s past its slice under PIDs that had ended (a child, or a process it passed the descriptor to, keeps the GPU open): vgpud ended the container (%d processes); it restarts under the pod's restart policy",
			e.Name, used>>20, e.GPU, processes)
	case usage.EndedPod:
		msg = fmt.Sprintf("the %d MiB container %q held on GPU %s were still listed after it was ended: vgpud ended every container of the pod (%d processes), since a sibling may hold the descriptor; they restart under the pod's restart policy",
			used>>20, e.Name, e.GPU, processes)
	default:
		msg = fmt.Sprintf("the %d MiB container %q held on GPU %s are still listed after every container of the pod was ended: a process outside the pod holds the descriptor, which vgpud may not look for; the memory stays charged to namespace %s and counted as used on the GPU until the driver frees it",
			used>>20, e.Name, e.GPU, e.Namespace)
	}
	args := []any{"pod", e.Namespace + "/" + e.Pod, "container", e.Name, "gpu", e.GPU, "stage", e.Stage.String(), "used_mib", used >> 20, "processes", processes}
	if err != nil {
		r.log.Warn("ending what holds GPU memory failed in part", append(args, "err", err)...)
	} else {
		r.log.Warn("ended what holds GPU memory past a slice", args...)
	}
	c := &usage.Container{Namespace: e.Namespace, Pod: e.Pod, PodUID: e.PodUID, Name: e.Name}
	r.tell(c, "GPUMemoryHeld", msg)
}

// forget drops what it counted of a container gone.
func (r *recorder) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.killed {
		if strings.HasPrefix(k, id+"/") {
			delete(r.killed, k)
		}
	}
}

func (r *recorder) kills(id, gpu string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed[id+"/"+gpu]
}

// tell records an Event on c's pod, when the informer still holds it.
func (r *recorder) tell(c *usage.Container, reason, msg string) {
	if p := r.pods.Get(c.Namespace, c.Pod); p != nil && string(p.UID) == c.PodUID {
		r.event(p, reason, msg)
	}
}

// overSlice says what u holds past its slice: a container's own, or,
// for a claim's share several containers use, theirs together; verb
// is "holds" or "held", plural its form for them.
func overSlice(u usage.Use, verb, plural string) string {
	if u.Pool == "" {
		return fmt.Sprintf("container %q %s %d MiB on GPU %s, over its slice of %d MiB", u.Container.Name, verb, u.UsedBytes>>20, u.GPU, u.LimitBytes>>20)
	}
	return fmt.Sprintf("container %q (%d MiB) and the other containers using claim %s's share (%d in all) %s %d MiB together on GPU %s, over the share of %d MiB",
		u.Container.Name, u.UsedBytes>>20, u.Claim, u.Holders, plural, u.PoolBytes>>20, u.GPU, u.LimitBytes>>20)
}

// tellsPool says whether u is the one of its pool's holders on its GPU
// that is told the pool is over: the largest (of equals, the first by
// container ID), so that a holder of next to nothing is not blamed and
// the pool's pods get one Event, not one each. A use of its own slice
// is told.
func tellsPool(uses []usage.Use, u usage.Use) bool {
	if u.Pool == "" {
		return true
	}
	for _, o := range uses {
		if o.Pool == u.Pool && o.GPU == u.GPU && (o.UsedBytes > u.UsedBytes || (o.UsedBytes == u.UsedBytes && o.Container.ID < u.Container.ID)) {
			return false
		}
	}
	return true
}
