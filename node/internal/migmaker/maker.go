// Package migmaker makes the MIG instances the leader books on demand
// and destroys them once their pods are gone. It records what it means
// to make before it makes it, so that a restart finds every instance it
// made, even one cut short by a crash, and it touches nothing else.
package migmaker

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/mig"
)

// Driver is what the maker needs of the GPUs (NVML, below).
type Driver interface {
	Make(parent string, profile int, at mig.Span) (gpu.Made, error)
	Destroy(parent string, profile int, at mig.Span, m gpu.Made, begun bool) (gone bool, err error)
	// InUse is an error wrapping gpu.ErrInUse while processes run on m.
	InUse(parent string, m gpu.Made) error
	Find(parent string, profile int, at mig.Span) (m gpu.Made, found bool, err error)
	DestroyHalfMade(parent string, gi int) error
}

// Slot is an instance the node may make: a profile at a placement.
type Slot struct {
	Parent  string
	Profile int    // NVML's GPU instance profile ID
	Name    string // its profile's name, e.g. 3g.40gb
	At      mig.Span
	// MemoryMiB and SMs are what the instance has.
	MemoryMiB int64
	SMs       int
}

// Demand is a slot a bound pod's assignment asks the node to make.
type Demand struct {
	Slot
	Pod string // namespace/name/uid
}

// Maker makes and destroys instances by its record at a path.
type Maker struct {
	path string
	drv  Driver
	log  *slog.Logger

	run sync.Mutex // one Reconcile at a time

	mu      sync.Mutex
	entries []Entry
	changed chan struct{}
	// checked are the made instances seen on their GPUs under their
	// UUIDs since the start or the last Recheck: only those are handed
	// out.
	checked map[string]bool
	// busy are the instances whose pods have ended while processes still
	// run on them, with what was said of it (said again only when that
	// changes): offered to no pod, handed to none, until they end.
	busy map[string]string
}

// Open reads the record at path. An unreadable record is an error: the
// maker will not guess which instances are its own.
func Open(path string, drv Driver, log *slog.Logger) (*Maker, error) {
	entries, err := load(path)
	if err != nil {
		return nil, err
	}
	return &Maker{path: path, drv: drv, log: log, entries: entries, changed: make(chan struct{}), checked: map[string]bool{}, busy: map[string]string{}}, nil
}

// Reload reads the record again: another process (the node role pod
// replaced) may have written it since Open, until it let go of the lock.
func (m *Maker) Reload() error {
	entries, err := load(m.path)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = entries
	return nil
}

// Made is the MIG device made for the instance named id for pod
// (namespace/name/uid), if it is made, checked, and that pod's: an
// instance another pod still holds, or held until the maker saw the
// next pod booked on it, is not handed out.
func (m *Maker) Made(id, pod string) (uuid string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.checked[id] {
		return "", false
	}
	return m.recorded(id, pod)
}

// Recorded is the MIG device the record says was made for instance id
// for pod, checked on its GPU or not.
func (m *Maker) Recorded(id, pod string) (uuid string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recorded(id, pod)
}

// recorded is Recorded with m.mu held.
func (m *Maker) recorded(id, pod string) (uuid string, ok bool) {
	for _, e := range m.entries {
		if e.ID == id && e.Pod == pod && e.Made != nil && e.Made.UUID != "" {
			return e.Made.UUID, true
		}
	}
	return "", false
}

// Recheck has the next Reconcile check every made instance against its
// GPU again, and hand none out meanwhile: after a rescan, a GPU reset
// may have taken them.
func (m *Maker) Recheck() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.checked)
}

// Entries is the record now.
func (m *Maker) Entries() []Entry { return m.snapshot() }

// Quiet runs f while no Reconcile runs: what it reads of the GPUs is
// not caught between a make and its record.
func (m *Maker) Quiet(f func()) {
	m.run.Lock()
	defer m.run.Unlock()
	f()
}

// MadeAll is every made instance's MIG device by name.
func (m *Maker) MadeAll() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for _, e := range m.entries {
		if e.Made != nil && e.Made.UUID != "" {
			out[e.ID] = e.Made.UUID
		}
	}
	return out
}

// Changed is closed at the next change to what is made.
func (m *Maker) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Maker) isChecked(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checked[id]
}

func (m *Maker) uncheck(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.checked, id)
}

func (m *Maker) check(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checked[id] = true
}

func (m *Maker) snapshot() []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.entries)
}

// commit saves entries and makes them current, telling waiters when
// what is made changed.
func (m *Maker) commit(entries []Entry, changed bool) error {
	if err := save(m.path, entries); err != nil {
		return err
	}
	m.mu.Lock()
	m.entries = slices.Clone(entries)
	m.mu.Unlock()
	if changed {
		m.tell()
	}
	return nil
}

// tell wakes those waiting on Changed.
func (m *Maker) tell() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.changed)
	m.changed = make(chan struct{})
}
