package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podevents"
)

// grantedContainers is the hook's view into the enforcer's register: each
// grant, with its slices, by the runtime's container ID. What goes is
// forgotten by the metrics and the recorder too, so that nothing per pod
// outlives the pod.
type grantedContainers struct {
	r *usage.Containers
	a *Role
}

var _ nrihook.Granted = grantedContainers{}

func (g grantedContainers) Granted(id string, c nrihook.Container, a protocol.ContainerAssignment) {
	slices := make(map[string]usage.Slice, len(a.GPUs))
	for _, s := range a.GPUs {
		// A MIG instance's slice is found on its GPU when a sample is
		// decided (usage.Sample.Parents): the hook may grant before the
		// node role has read its GPUs.
		slices[s.UUID] = usage.Slice{MemoryBytes: uint64(max(s.MemoryMiB, 0)) << 20, Cores: s.Cores}
		// From 0, so that the first kill shows in an increase().
		g.a.metrics.KillsFrom0(c.Namespace, c.Pod, c.Name, s.UUID)
	}
	g.r.Add(usage.Container{ID: id, Namespace: c.Namespace, Pod: c.Pod, PodUID: c.UID, Name: c.Name, Slices: slices})
}

func (g grantedContainers) Removed(uid string) { g.forget(g.r.RemovePod(uid)) }

func (g grantedContainers) Retain(ids map[string]bool) { g.forget(g.r.Retain(ids)) }

func (g grantedContainers) forget(gone []usage.Container) {
	g.a.mu.Lock()
	rec := g.a.usageRec
	g.a.mu.Unlock()
	for _, c := range gone {
		if rec != nil {
			rec.forget(c.ID)
		}
		if !g.r.Has(c.Namespace, c.Pod) {
			g.a.metrics.ForgetPod(c.Namespace, c.Pod)
		}
	}
}

// newEnforcer samples lib's processes for the containers the hook
// registered, under the node's settings (validated: the mode parses).
// Its Events go through events, the role's, which outlives a rescan; so
// does what it remembers (usageMemory).
func (a *Role) newEnforcer(lib nvml.Interface, devs []gpu.Device, pods *nodepods.Index, events podevents.Sink) *usage.Enforcer {
	mode, _ := usage.ParseMode(a.cfg.GPUUsage)
	sample := usage.NVMLSampler(lib, devs, a.od.madeParents)
	event := events.As(corev1.EventTypeWarning, "Enforcing")
	rec := &usageRecorder{metrics: a.metrics, pods: pods, event: event, mode: mode,
		margin: a.cfg.GPUUsageMargin, reported: map[string]bool{}, killed: map[string]int{}, log: a.log.With("component", "usage")}
	host := usage.Procfs{Root: "/proc"}
	rules := usage.Rules{Mode: mode, Margin: uint64(a.cfg.GPUUsageMargin) << 20, Reserve: uint64(a.cfg.GPUUsageReserve) << 20}
	e := usage.NewEnforcer(usage.Options{Rules: rules, Period: a.cfg.GPUUsagePeriod}, sample, a.containers, host,
		func(ns, pod, uid string) []string { return runningContainers(pods.Get(ns, pod), uid) }, a.usageMemory(host), rec, a.clock, a.log.With("component", "usage"))
	a.metrics.ReportUsage(func() usage.Verdict { v, _ := e.Last(); return v })
	a.mu.Lock()
	a.enforcer, a.usageRec = e, rec
	a.mu.Unlock()
	return e
}

// usageMemory is what the enforcer remembers, read from the node's file
// once for the role's life: every generation's enforcer shares it.
func (a *Role) usageMemory(host usage.Procfs) *usage.Memory {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.usageMem == nil {
		m, err := usage.LoadMemory(a.usageRecord(), host.BootID())
		if err != nil {
			a.log.Warn("GPU process holders not remembered: starting fresh, ending nothing for one period", "err", err)
		}
		a.usageMem = m
	}
	return a.usageMem
}

// usageRecord is this node's --gpu-usage-record; "" for none.
func (a *Role) usageRecord() string {
	return strings.ReplaceAll(a.cfg.GPUUsageRecord, "{node}", a.node)
}

// keepMockProcesses has the mock's process list outlive the process, as
// a driver's outlives vgpud's restarts: beside the enforcer's record.
func (a *Role) keepMockProcesses(m *gpu.Mock) error {
	rec := a.usageRecord()
	if rec == "" {
		return nil
	}
	return m.KeepProcesses(filepath.Join(filepath.Dir(rec), "mock-processes-"+a.node+".json"))
}

// runningContainers are the runtime's IDs of pod's running containers,
// where pod is the one with that UID.
func runningContainers(pod *corev1.Pod, uid string) []string {
	if pod == nil || string(pod.UID) != uid {
		return nil
	}
	var ids []string
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range list {
			if _, id, ok := strings.Cut(st.ContainerID, "://"); ok && st.State.Running != nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// useSnapshot is inspect's view of the latest sample; nil before the
// GPUs are found.
func (a *Role) useSnapshot() *inspect.GPUUse {
	a.mu.Lock()
	e, rec := a.enforcer, a.usageRec
	a.mu.Unlock()
	if e == nil {
		return nil
	}
	v, at := e.Last()
	out := &inspect.GPUUse{Mode: a.cfg.GPUUsage, Taken: at, Containers: []inspect.ContainerUse{}, Unattributed: []inspect.Process{}}
	margin := uint64(a.cfg.GPUUsageMargin) << 20
	stuck := map[string]bool{}
	for _, u := range v.Stuck {
		stuck[u.Container.ID+"/"+u.GPU] = true
	}
	for _, u := range v.Uses {
		c := u.Container
		out.Containers = append(out.Containers, inspect.ContainerUse{Namespace: c.Namespace, Pod: c.Pod, Container: c.Name, GPU: u.GPU,
			UsedMiB: u.UsedBytes >> 20, SliceMiB: u.LimitBytes >> 20, Whole: u.Whole, Over: u.Over(margin), Stuck: stuck[c.ID+"/"+u.GPU],
			SMPercent: u.SMPercent, Cores: u.Cores, Processes: len(u.Processes), Kills: rec.kills(c.ID, u.GPU)})
	}
	for _, p := range v.Unattributed {
		out.Unattributed = append(out.Unattributed, inspect.Process{GPU: p.GPU, PID: p.PID, UsedMiB: p.UsedBytes >> 20,
			Orphaned: p.Orphaned, Namespace: p.Holder.Namespace, Pod: p.Holder.Pod})
	}
	gpus := map[string]bool{}
	maps.Copy(gpus, v.Full)
	for g, b := range v.Held {
		gpus[g] = gpus[g] || b > 0
	}
	names := map[string][2]string{} // pod UID: namespace, name
	for _, u := range v.Uses {
		names[u.Container.PodUID] = [2]string{u.Container.Namespace, u.Container.Pod}
	}
	for _, p := range v.Unattributed {
		names[p.Holder.PodUID] = [2]string{p.Holder.Namespace, p.Holder.Pod}
	}
	for _, g := range slices.Sorted(maps.Keys(gpus)) {
		if !gpus[g] {
			continue
		}
		h := inspect.GPUHeld{GPU: g, HeldMiB: v.Held[g] >> 20, Full: v.Full[g]}
		for uid, b := range v.HeldBy[g] {
			h.Pods = append(h.Pods, inspect.HeldPod{UID: uid, Namespace: names[uid][0], Pod: names[uid][1], MiB: b >> 20})
		}
		slices.SortFunc(h.Pods, func(x, y inspect.HeldPod) int { return cmp.Or(cmp.Compare(y.MiB, x.MiB), cmp.Compare(x.UID, y.UID)) })
		out.GPUs = append(out.GPUs, h)
	}
	for _, end := range e.Ends() {
		out.Ends = append(out.Ends, inspect.End{Namespace: end.Namespace, Pod: end.Pod, Container: end.Name, GPU: end.GPU, Stage: end.Stage.String()})
	}
	return out
}

// usageRecorder tells of each sample and kill: metrics, a log line and an
// Event on the pod.
type usageRecorder struct {
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

func (r *usageRecorder) Sampled(v usage.Verdict, took time.Duration) {
	r.metrics.Sampled(took)
	if r.mode != usage.Report {
		return
	}
	over := map[string]bool{}
	for _, u := range v.Uses {
		if !u.Over(uint64(r.margin) << 20) {
			continue
		}
		key := u.Container.ID + "/" + u.GPU
		over[key] = true
		if r.reported[key] {
			continue
		}
		msg := fmt.Sprintf("container %q holds %d MiB on GPU %s, over its slice of %d MiB plus the node's margin of %d MiB; this node only reports (--gpu-usage=report), so nothing was killed",
			u.Container.Name, u.UsedBytes>>20, u.GPU, u.LimitBytes>>20, r.margin)
		r.log.Warn("container over its GPU memory slice", "pod", u.Container.Namespace+"/"+u.Container.Pod, "container", u.Container.Name, "gpu", u.GPU, "used_mib", u.UsedBytes>>20, "slice_mib", u.LimitBytes>>20)
		r.tell(u.Container, "GPUMemoryOverSlice", msg)
	}
	r.reported = over
}

func (r *usageRecorder) Killed(k usage.Kill, first bool, err error) {
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
	msg := fmt.Sprintf("container %q held %d MiB on GPU %s, over its slice of %d MiB plus the node's margin of %d MiB: vgpud killed its largest process there (PID %d on the node, %d MiB)",
		c.Name, u.UsedBytes>>20, u.GPU, u.LimitBytes>>20, r.margin, k.Victim.PID, k.Victim.UsedBytes>>20)
	if k.Full {
		msg = fmt.Sprintf("container %q held %d MiB on GPU %s, over its slice of %d MiB, while the GPU was full (its processes held more than its memory less the node's reserve; the margin is room on a GPU that has room): vgpud killed its largest process there (PID %d on the node, %d MiB)",
			c.Name, u.UsedBytes>>20, u.GPU, u.LimitBytes>>20, k.Victim.PID, k.Victim.UsedBytes>>20)
	}
	if first {
		msg += "; it was the container's first process, so the container restarts under the pod's restart policy"
	}
	r.log.Warn("killed a process over its container's GPU memory slice", "pod", c.Namespace+"/"+c.Pod, "container", c.Name, "gpu", u.GPU,
		"pid", k.Victim.PID, "used_mib", u.UsedBytes>>20, "slice_mib", u.LimitBytes>>20, "first", first)
	r.tell(c, "GPUMemoryOverSlice", msg)
}

func (r *usageRecorder) Ended(e usage.End, used uint64, processes int, err error) {
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
func (r *usageRecorder) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.killed {
		if strings.HasPrefix(k, id+"/") {
			delete(r.killed, k)
		}
	}
}

func (r *usageRecorder) kills(id, gpu string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed[id+"/"+gpu]
}

// tell records an Event on c's pod, when the informer still holds it.
func (r *usageRecorder) tell(c *usage.Container, reason, msg string) {
	if p := r.pods.Get(c.Namespace, c.Pod); p != nil && string(p.UID) == c.PodUID {
		r.event(p, reason, msg)
	}
}

// publishUse writes the latest sample to the node's vgpud.io/usage
// annotation for `vgpud inspect --cluster`: at most every
// protocol.UsagePublishEvery, and only when it changed by more than
// rounding (64 MiB, 5 % SM), so an idle node writes nothing.
func (a *Role) publishUse(ctx context.Context, pub *inventory.Publisher) error {
	if a.cfg.GPUUsage == usage.Off.String() {
		// What an earlier run published would otherwise show for good.
		if err := pub.ClearUsage(ctx); err != nil {
			a.log.Warn("clear GPU usage annotation", "err", err)
		}
		return nil
	}
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.clock.After(protocol.UsagePublishEvery):
		}
		s := a.useSnapshot()
		if s == nil || s.Taken.IsZero() {
			continue
		}
		u, same, err := usageValue(s)
		if err != nil {
			a.log.Error("encode GPU usage", "err", err)
			continue
		}
		if same == last {
			continue
		}
		u.Taken = s.Taken
		value, err := protocol.EncodeUsage(u)
		if err == nil {
			err = pub.SetUsage(ctx, value)
		}
		if err != nil {
			a.log.Warn("publish GPU usage", "err", err)
			continue
		}
		last = same
	}
}
