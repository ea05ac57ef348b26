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
	// Kill ends pid if it still runs in container id and, asked once the
	// process is held, listed says the GPU still lists pid: the PID in
	// the sample may have been reused since by another process.
	Kill(pid int, id string, listed func() bool) error
	// First reports whether pid is its PID namespace's first process.
	First(pid int) bool
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

	mu   sync.Mutex
	last Verdict
	at   time.Time
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
	v := Decide(sample, e.owner, e.mode, e.margin)
	for _, k := range v.Kills {
		first := e.host.First(k.Victim.PID)
		err := e.host.Kill(k.Victim.PID, k.Use.Container.ID, func() bool { return e.lists(k.Victim) })
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

// lists reports whether a fresh sample shows p's PID on p's GPU. It
// costs one more sample, on a kill only.
func (e *Enforcer) lists(p Process) bool {
	s, _ := e.sample() // what answered counts; p's GPU not answering is no
	for _, q := range s.Processes {
		if q.PID == p.PID && q.GPU == p.GPU && q.UsedBytes > 0 {
			return true
		}
	}
	return false
}

// owner is the registered container pid runs in; nil for one vgpud
// cannot attribute (no container, or one the hook did not grant).
func (e *Enforcer) owner(pid int) *Container {
	id, ok, err := e.host.ContainerID(pid)
	if err != nil || !ok {
		// An ended process, or another PID namespace's: unattributed.
		return nil
	}
	return e.containers.Get(id)
}

// Last is the latest sample's verdict and when it was taken.
func (e *Enforcer) Last() (Verdict, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last, e.at
}
