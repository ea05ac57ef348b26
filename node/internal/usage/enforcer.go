package usage

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Sampler reads the node's GPUs (NVML, or a mock).
type Sampler func() (Sample, error)

// Host is what the enforcer reads of and does to the node's processes.
type Host interface {
	// ContainerID is the runtime's ID of the container pid runs in; ok
	// is false for a process in no container.
	ContainerID(pid int) (id string, ok bool, err error)
	// Kill ends pid if it still runs in container id and is the process
	// that started at start: the PID in the sample may have been reused
	// since by another process.
	Kill(pid int, id string, start uint64) error
	// First reports whether pid is its PID namespace's first process.
	First(pid int) bool
	// Start is when pid started (clock ticks since boot); live is false
	// for a process that ended or is a zombie.
	Start(pid int) (start uint64, live bool)
	// EndContainer ends every process of container id and says how many
	// it signalled.
	EndContainer(id string) (int, error)
}

// PodContainers lists the runtime's IDs of the running containers of
// the pod namespace/name with that UID, as the node's pod informer
// knows them; nil where it knows no such pod.
type PodContainers func(namespace, pod, uid string) []string

// Recorder tells the world what a sample showed and what was killed:
// metrics, log lines and Events on the pods.
type Recorder interface {
	Sampled(v Outcome, took time.Duration)
	// Killed is told of each kill tried: err is nil when the signal was
	// sent, ErrMoved when the process had already left the container.
	Killed(k Kill, first bool, err error)
	// Ended is told when a container, then its pod, was ended for memory
	// listed under PIDs that had ended (e.Stage says which), or found
	// still held after both; processes is how many were signalled.
	Ended(e End, usedBytes uint64, processes int, err error)
}

// Enforcer samples the node's GPU processes every period, attributes
// them to the containers the runtime hook registered, and acts as its
// mode says.
type Enforcer struct {
	rules      Rules
	period     time.Duration
	sample     Sampler
	containers *Containers
	host       Host
	pods       PodContainers
	rec        Recorder
	clock      clock.Clock
	log        *slog.Logger

	// mem outlives this enforcer (a rescan builds another): who held
	// each listed PID first, and the containers ended.
	mem *Memory
	// stuck counts, by container ID, the samples in a row it was Stuck.
	// Only the Run goroutine touches it.
	stuck map[string]int

	mu   sync.Mutex
	last Outcome
	at   time.Time
}

// Options are a node's settings for its enforcer.
type Options struct {
	Rules
	Period time.Duration
}

// NewEnforcer returns an enforcer of containers by o, which remembers in
// mem.
func NewEnforcer(o Options, sample Sampler, containers *Containers, host Host, pods PodContainers, mem *Memory, rec Recorder, clk clock.Clock, log *slog.Logger) *Enforcer {
	return &Enforcer{rules: o.Rules, period: o.Period, sample: sample, containers: containers, host: host, pods: pods, mem: mem,
		stuck: map[string]int{}, rec: rec, clock: clk, log: log}
}

// Run samples every period until ctx ends; with mode Off it returns at once.
func (e *Enforcer) Run(ctx context.Context) error {
	if e.rules.Mode == Off {
		return nil
	}
	e.log.Info("GPU usage sampling", "mode", e.rules.Mode.String(), "period", e.period, "margin_bytes", e.rules.Margin, "reserve_bytes", e.rules.Reserve)
	for {
		e.Step()
		// A period from one sample's end to the next's start: a slow
		// sample delays the next rather than piling samples up.
		select {
		case <-ctx.Done():
			return nil
		case <-e.clock.After(e.period):
		}
	}
}

// Step takes one sample and acts on it.
func (e *Enforcer) Step() Outcome {
	start := e.clock.Now()
	sample, err := e.sample()
	if err != nil {
		// Some GPUs may still have answered: act on what they said.
		e.log.Warn("GPU processes not all read", "err", err)
	}
	e.mem.mu.Lock()
	defer e.mem.mu.Unlock()
	// Fresh, the enforcer cannot tell a reused PID from its first
	// holder: it ends nothing for one period.
	quiet := e.mem.quiet
	e.mem.quiet = false
	// A GPU that did not answer lists nothing: what is known of its
	// PIDs, and of what was ended for them, is kept, not forgotten.
	partial := err != nil
	owners := e.attribute(sample.Processes, partial)
	rules := e.rules
	if quiet {
		rules.Mode = Report // decides, shows, ends nothing
	}
	v := Decide(sample, func(pid int) *Container { return owners[pid] }, rules)
	for _, k := range v.Kills {
		first := e.host.First(k.Victim.PID)
		err := e.host.Kill(k.Victim.PID, k.Use.Container.ID, k.Victim.Start)
		if err != nil && !errors.Is(err, ErrMoved) {
			e.log.Error("kill of a process over its container's GPU memory failed", "pid", k.Victim.PID, "err", err)
		}
		e.rec.Killed(k, first, err)
	}
	e.escalate(sample.Processes, v, quiet || e.rules.Mode != Enforce, partial)
	if err := e.mem.save(); err != nil {
		e.log.Warn("remember GPU process holders", "err", err)
	}
	e.rec.Sampled(v, e.clock.Since(start))
	e.mu.Lock()
	e.last, e.at = v, start
	e.mu.Unlock()
	return v
}

// escalate ends, with act, a container Stuck two samples in a row;
// then, where its memory is still listed two samples after, every
// container of its pod; then, still listed, calls it held. An End is
// forgotten once none of its memory is listed. e.mem.mu held.
func (e *Enforcer) escalate(procs []Process, v Outcome, quiet, partial bool) {
	listed := map[string]uint64{} // by first holder's container (attribute set it)
	for _, p := range procs {
		if p.Holder.Container != "" {
			listed[p.Holder.Container] += p.UsedBytes
		}
	}
	now := map[string]bool{}
	ended := map[string]bool{} // this sample
	for _, u := range v.Stuck {
		id := u.Container.ID
		if now[id] {
			continue // stuck on another GPU too: one sample is one count
		}
		now[id] = true
		if e.mem.ends[id] != nil || quiet {
			continue // ended already (its End goes on below), or not to act on
		}
		if e.stuck[id]++; e.stuck[id] < 2 {
			continue
		}
		c := u.Container
		end := &End{Container: id, Namespace: c.Namespace, Pod: c.Pod, PodUID: c.PodUID, Name: c.Name, GPU: u.GPU, Stage: EndedContainer}
		n, err := e.host.EndContainer(id)
		end.Failed = err != nil
		e.mem.ends[id], ended[id] = end, true
		e.rec.Ended(*end, listed[id], n, err)
	}
	for id := range e.stuck {
		if !now[id] || e.mem.ends[id] != nil {
			delete(e.stuck, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.mem.ends)) {
		end := e.mem.ends[id]
		if listed[id] == 0 {
			if !partial {
				delete(e.mem.ends, id) // freed
			}
			continue
		}
		if ended[id] {
			continue
		}
		if end.Samples++; end.Samples < 2 || end.Stage == Held || quiet {
			continue
		}
		end.Samples = 0
		// An end that left processes running (one forking faster than it
		// was stopped) is tried again before going further.
		stage := end.Stage
		if !end.Failed {
			stage++
		}
		var n int
		var err error
		switch stage {
		case EndedContainer:
			n, err = e.host.EndContainer(id)
		case EndedPod:
			// The descriptor may have gone to a sibling container.
			var errs []error
			for _, cid := range e.pods(end.Namespace, end.Pod, end.PodUID) {
				k, err := e.host.EndContainer(cid)
				n += k
				errs = append(errs, err)
			}
			err = errors.Join(errs...)
		}
		again := stage == end.Stage
		end.Stage, end.Failed = stage, err != nil
		if !again || err != nil {
			e.rec.Ended(*end, listed[id], n, err)
		}
	}
}

// attribute names the registered container of each listed PID: the one
// that held it when first seen alive (nil for none, or one the hook did
// not grant). A PID that has since ended, become a zombie or been reused
// is marked Orphaned in procs: its memory still counts against the
// first holder, and it is never a victim, so a reused PID is never
// killed for memory another process held. A PID first seen dead is
// charged to nobody for as long as it is listed. e.mem.mu held.
func (e *Enforcer) attribute(procs []Process, partial bool) map[int]*Container {
	owners := map[int]*Container{}
	next := make(map[int]Holder, len(e.mem.holders))
	if partial {
		// What a GPU that did not answer lists is unknown this time: its
		// PIDs' first holders stay, for a while, or a later holder would
		// be blamed.
		for pid, h := range e.mem.holders {
			if h.Carried < maxCarried {
				h.Carried++
				next[pid] = h
			}
		}
	}
	done := map[int]bool{}
	orphaned := map[int]bool{}
	for _, p := range procs {
		if done[p.PID] {
			continue
		}
		done[p.PID] = true
		start, live := e.host.Start(p.PID)
		was, known := e.mem.holders[p.PID]
		switch {
		case known && live && start == was.Start && !was.Dead:
			was.Carried = 0
			next[p.PID] = was
		case known && was.Carried > 0 && live && start != was.Start:
			// Not listed while a GPU did not answer, and now another
			// process: whose the memory is cannot be told. Nobody's.
			next[p.PID] = Holder{PID: p.PID, Dead: true}
			orphaned[p.PID] = true
		case known:
			was.Carried = 0
			next[p.PID] = was
			orphaned[p.PID] = true
		case live:
			h := Holder{PID: p.PID, Start: start}
			if id, ok, err := e.host.ContainerID(p.PID); err == nil && ok {
				h = e.holder(p.PID, start, id) // else the host's, another runtime's, another PID namespace's
			}
			next[p.PID] = h
		default:
			// Ended before it was first seen. A zombie still names its
			// cgroup until it is reaped: charged to that container, never
			// to a later holder of the PID. Reaped, it is nobody's.
			h := Holder{PID: p.PID, Dead: true}
			if id, ok, err := e.host.ContainerID(p.PID); err == nil && ok {
				h = e.holder(p.PID, 0, id)
			}
			next[p.PID] = h
			orphaned[p.PID] = true
		}
		if id := next[p.PID].Container; id != "" {
			if c := e.containers.Get(id); c != nil {
				owners[p.PID] = c
			}
		}
	}
	for i := range procs {
		procs[i].Orphaned = orphaned[procs[i].PID]
		procs[i].Holder = next[procs[i].PID]
		procs[i].Start = procs[i].Holder.Start
	}
	e.mem.holders = next
	return owners
}

// holder is pid's first holder: container id, named as the hook
// registered it where it did.
func (e *Enforcer) holder(pid int, start uint64, id string) Holder {
	h := Holder{PID: pid, Start: start, Container: id}
	if c := e.containers.Get(id); c != nil {
		h.Namespace, h.Pod, h.PodUID, h.Name = c.Namespace, c.Pod, c.PodUID, c.Name
	}
	return h
}

// Last is the latest sample's verdict and when it was taken.
func (e *Enforcer) Last() (Outcome, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last, e.at
}

// Ends are the containers ended whole whose memory is still listed, by
// container ID.
func (e *Enforcer) Ends() []End {
	e.mem.mu.Lock()
	defer e.mem.mu.Unlock()
	out := make([]End, 0, len(e.mem.ends))
	for _, id := range slices.Sorted(maps.Keys(e.mem.ends)) {
		out = append(out, *e.mem.ends[id])
	}
	return out
}
