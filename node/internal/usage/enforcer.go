package usage

import (
	"context"
	"errors"
	"log/slog"
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
}

// Recorder tells the world what a sample showed and what was killed:
// metrics, log lines and Events on the pods.
type Recorder interface {
	Sampled(v Verdict, took time.Duration)
	// Killed is told of each kill tried: err is nil when the signal was
	// sent, ErrMoved when the process had already left the container.
	Killed(k Kill, first bool, err error)
}

// Enforcer samples the node's GPU processes every period, attributes
// them to the containers the runtime hook registered, and acts as its
// mode says.
type Enforcer struct {
	mode       Mode
	period     time.Duration
	margin     uint64
	sample     Sampler
	containers *Containers
	host       Host
	rec        Recorder
	clock      clock.Clock
	log        *slog.Logger

	// seen is who held each listed PID when it was first seen alive: the
	// driver lists a GPU client under the PID that opened it for as long
	// as any process holds its file descriptor, so the PID may have
	// ended, be a zombie, or have been reused by another container's
	// process. Only the Run goroutine touches it.
	seen map[int]firstHolder

	mu   sync.Mutex
	last Verdict
	at   time.Time
}

type firstHolder struct {
	start uint64
	id    string // container ID; "" for none
}

// Options are a node's settings for its enforcer.
type Options struct {
	Mode   Mode
	Period time.Duration
	// Margin is what a container may hold past its slice on a GPU before
	// it is over: room for CUDA contexts, which the slice's limit does
	// not count.
	Margin uint64
}

// NewEnforcer returns an enforcer of containers by o.
func NewEnforcer(o Options, sample Sampler, containers *Containers, host Host, rec Recorder, clk clock.Clock, log *slog.Logger) *Enforcer {
	return &Enforcer{mode: o.Mode, period: o.Period, margin: o.Margin, sample: sample, containers: containers, host: host, rec: rec, clock: clk, log: log}
}

// Run samples every period until ctx ends; with mode Off it returns at once.
func (e *Enforcer) Run(ctx context.Context) error {
	if e.mode == Off {
		return nil
	}
	e.log.Info("GPU usage sampling", "mode", e.mode.String(), "period", e.period, "margin_bytes", e.margin)
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
func (e *Enforcer) Step() Verdict {
	start := e.clock.Now()
	sample, err := e.sample()
	if err != nil {
		// Some GPUs may still have answered: act on what they said.
		e.log.Warn("GPU processes not all read", "err", err)
	}
	owners := e.attribute(sample.Processes)
	v := Decide(sample, func(pid int) *Container { return owners[pid] }, e.mode, e.margin)
	for _, k := range v.Kills {
		first := e.host.First(k.Victim.PID)
		err := e.host.Kill(k.Victim.PID, k.Use.Container.ID, k.Victim.Start)
		if err != nil && !errors.Is(err, ErrMoved) {
			e.log.Error("kill of a process over its container's GPU memory failed", "pid", k.Victim.PID, "err", err)
		}
		e.rec.Killed(k, first, err)
	}
	e.rec.Sampled(v, e.clock.Since(start))
	e.mu.Lock()
	e.last, e.at = v, start
	e.mu.Unlock()
	return v
}

// attribute names the registered container of each listed PID: the one
// that held it when first seen alive (nil for none, or one the hook did
// not grant). A PID that has since ended, become a zombie or been reused
// is marked Orphaned in procs: its memory still counts against the
// first holder, and it is never a victim, so a reused PID is never
// killed for memory another process held.
func (e *Enforcer) attribute(procs []Process) map[int]*Container {
	owners := map[int]*Container{}
	next := make(map[int]firstHolder, len(e.seen))
	orphaned := map[int]bool{}
	for _, p := range procs {
		if _, done := next[p.PID]; done {
			continue
		}
		start, live := e.host.Start(p.PID)
		was, known := e.seen[p.PID]
		switch {
		case known && live && start == was.start:
			next[p.PID] = was
		case known:
			next[p.PID] = was
			orphaned[p.PID] = true
		case live:
			id, ok, err := e.host.ContainerID(p.PID)
			if err != nil || !ok {
				id = "" // the host's, another runtime's, another PID namespace's
			}
			next[p.PID] = firstHolder{start: start, id: id}
		default:
			continue // never seen alive: nobody's to charge
		}
		if id := next[p.PID].id; id != "" {
			if c := e.containers.Get(id); c != nil {
				owners[p.PID] = c
			}
		}
	}
	for i := range procs {
		procs[i].Orphaned = orphaned[procs[i].PID]
		procs[i].Start = next[procs[i].PID].start
	}
	e.seen = next
	return owners
}

// Last is the latest sample's verdict and when it was taken.
func (e *Enforcer) Last() (Verdict, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last, e.at
}
