// Package migmaker makes the MIG instances the leader books on demand
// and destroys them once their pods are gone. It records what it means
// to make before it makes it, so that a restart finds every instance it
// made, even one cut short by a crash, and it touches nothing else.
package migmaker

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/mig"
)

// Driver is what the maker needs of the GPUs (NVML, below).
type Driver interface {
	Make(parent string, profile int, at mig.Placement) (gpu.Made, error)
	Destroy(parent string, profile int, at mig.Placement, m gpu.Made, begun bool) (gone bool, err error)
	// InUse is an error wrapping gpu.ErrInUse while processes run on m.
	InUse(parent string, m gpu.Made) error
	Find(parent string, profile int, at mig.Placement) (m gpu.Made, found bool, err error)
	DestroyHalfMade(parent string, gi int) error
}

// Slot is an instance the node may make: a profile at a placement.
type Slot struct {
	Parent  string
	Profile int    // NVML's GPU instance profile ID
	Name    string // its profile's name, e.g. 3g.40gb
	At      mig.Placement
	// MemoryMiB and SMs are what the instance has.
	MemoryMiB int64
	SMs       int
}

// Want is a slot a bound pod's assignment asks the node to make.
type Want struct {
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

// Reconcile makes each instance want names that is not made, and
// destroys each made instance no pod holds (held: every instance a pod
// that has not ended is booked on, known to the catalog or not), after
// settling what a crash cut short. Every instance is tried; the errors
// are joined. changed says whether what is made changed.
func (m *Maker) Reconcile(want map[string]Want, held map[string]string) (changed bool, err error) {
	m.run.Lock()
	defer m.run.Unlock()
	entries := m.snapshot()
	dirty := false
	var errs []error
	keep := entries[:0]
	for i, e := range entries {
		if e.Made != nil && !m.isChecked(e.ID) {
			// After a start or a rescan: an instance in the record may
			// be gone (the host rebooted, the GPU was reset), and its
			// IDs another's.
			found, ok, err := m.drv.Find(e.Parent, e.Profile, mig.Placement{Start: e.Start, Size: e.Size})
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("instance %s: %w", e.ID, err))
				keep = append(keep, e)
				continue
			case ok && found.UUID == "" && found.GI == e.Made.GI && e.Destroying:
				// A destroy cut short between the compute and the GPU
				// instance: finish it, or its room is lost for good.
				if err := m.drv.DestroyHalfMade(e.Parent, found.GI); err != nil {
					errs = append(errs, fmt.Errorf("instance %s, destroyed in half: %w", e.ID, err))
					keep = append(keep, e)
					continue
				}
				m.log.Info("destroyed a MIG instance destroyed in half before", "instance", e.ID, "gpu", e.Parent, "gi", found.GI)
				changed, dirty = true, true
				continue
			case !ok || found.UUID != e.Made.UUID:
				m.log.Warn("a MIG instance vgpud made is gone (the host rebooted, or the GPU was reset); forgotten", "instance", e.ID, "uuid", e.Made.UUID, "pod", e.Pod)
				changed, dirty = true, true
				continue
			}
			if *e.Made != found {
				e.Made, dirty = &found, true // the IDs as the driver has them now
			}
			m.check(e.ID)
			if _, isHeld := held[e.ID]; isHeld {
				// Waiters may now be handed it. (One no pod holds is
				// being destroyed: a destroy that keeps failing looks
				// again each pass, quietly.)
				changed = true
				m.log.Info("a MIG instance vgpud made is there still", "instance", e.ID, "uuid", found.UUID, "pod", e.Pod)
			}
		}
		if e.Made == nil {
			settled, ok, err := m.settle(e)
			if err != nil {
				errs = append(errs, err)
				keep = append(keep, e)
				continue
			}
			dirty = true
			if !ok {
				continue
			}
			e, changed = settled, true
		}
		at := mig.Placement{Start: e.Start, Size: e.Size}
		pod, isHeld := held[e.ID]
		if !isHeld {
			if err := m.drv.InUse(e.Parent, *e.Made); errors.Is(err, gpu.ErrInUse) {
				changed = m.markBusy(e, err) || changed
				if e.Destroying {
					// Its MIG device is there, so it is whole: no
					// destroy is under way while the process lives.
					e.Destroying, dirty = false, true
				}
				keep = append(keep, e)
				continue
			}
			begun := e.Destroying
			if !begun {
				e.Destroying = true
				// The record as this pass has it so far, this entry
				// marked: what the pass dropped stays dropped should
				// its end not be written.
				if err := m.commit(append(append(slices.Clone(keep), e), entries[i+1:]...), false); err != nil {
					errs = append(errs, fmt.Errorf("instance %s: %w", e.ID, err))
					e.Destroying = false
					keep = append(keep, e)
					continue
				}
			}
			gone, err := m.drv.Destroy(e.Parent, e.Profile, at, *e.Made, begun)
			if errors.Is(err, gpu.ErrInUse) { // a process came between: nothing was destroyed
				changed = m.markBusy(e, err) || changed
				e.Destroying, dirty = false, true
				keep = append(keep, e)
				continue
			}
			if err != nil {
				// Perhaps destroyed in half: looked at again, as after a
				// start, and handed to no pod meanwhile.
				m.uncheck(e.ID)
				errs = append(errs, fmt.Errorf("instance %s (%s), made for %s: %w", e.ID, e.Made.UUID, e.Pod, err))
				keep = append(keep, e)
				continue
			}
			m.unmarkBusy(e.ID)
			changed, dirty = true, true
			m.log.Info("destroyed a MIG instance", "instance", e.ID, "uuid", e.Made.UUID, "pod", e.Pod, "already gone", gone)
			continue
		}
		if e.Pod != pod {
			// The next pod booked on a made instance takes it as it
			// is, once no process of the one before runs on it.
			if err := m.drv.InUse(e.Parent, *e.Made); errors.Is(err, gpu.ErrInUse) {
				changed = m.markBusy(e, err) || changed
				keep = append(keep, e)
				continue
			}
			e.Pod, changed, dirty = pod, true, true
		}
		if e.Destroying {
			e.Destroying, dirty = false, true // held again before it went
		}
		if m.unmarkBusy(e.ID) {
			changed = true
		}
		keep = append(keep, e)
	}
	m.forgetBusy(keep)
	if dirty {
		if err := m.commit(keep, changed); err != nil {
			return changed, errors.Join(append(errs, err)...)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if slices.ContainsFunc(keep, func(e Entry) bool { return e.ID == id }) {
			continue
		}
		w := want[id]
		e := Entry{ID: id, Parent: w.Parent, Profile: w.Profile, Start: w.At.Start, Size: w.At.Size, Pod: w.Pod}
		keep = append(keep, e)
		if err := m.commit(keep, false); err != nil { // the intent, before the make
			return changed, errors.Join(append(errs, err)...)
		}
		made, err := m.drv.Make(w.Parent, w.Profile, w.At)
		if err != nil {
			keep = keep[:len(keep)-1]
			errs = append(errs, fmt.Errorf("make %s for %s: %w", id, w.Pod, err))
			if err := m.commit(keep, false); err != nil {
				return changed, errors.Join(append(errs, err)...)
			}
			continue
		}
		keep[len(keep)-1].Made = &made
		m.check(id)
		changed = true
		if err := m.commit(keep, true); err != nil {
			return changed, errors.Join(append(errs, err)...)
		}
		m.log.Info("made a MIG instance", "instance", id, "uuid", made.UUID, "pod", w.Pod)
	}
	if changed {
		m.tell()
	}
	return changed, errors.Join(errs...)
}

// settle finds what became of an intended instance (e.Made nil): made
// whole, it is e made (ok); made in half, it is destroyed; not made,
// it is dropped.
func (m *Maker) settle(e Entry) (Entry, bool, error) {
	found, ok, err := m.drv.Find(e.Parent, e.Profile, mig.Placement{Start: e.Start, Size: e.Size})
	switch {
	case err != nil:
		return e, false, fmt.Errorf("instance %s: %w", e.ID, err)
	case !ok:
		return e, false, nil
	case found.UUID == "":
		if err := m.drv.DestroyHalfMade(e.Parent, found.GI); err != nil {
			return e, false, fmt.Errorf("instance %s, made in half: %w", e.ID, err)
		}
		m.log.Info("destroyed a MIG instance made in half", "instance", e.ID, "gpu", e.Parent, "gi", found.GI)
		return e, false, nil
	}
	e.Made = &found
	m.check(e.ID)
	m.log.Info("found a MIG instance made before a restart", "instance", e.ID, "uuid", found.UUID)
	return e, true, nil
}

// Busy says whether processes of an ended pod keep instance id.
func (m *Maker) Busy(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.busy[id]
	return ok
}

// markBusy notes that processes keep e, saying so when what keeps it
// changed; first says it was not busy before.
func (m *Maker) markBusy(e Entry, err error) (first bool) {
	m.mu.Lock()
	said, was := m.busy[e.ID]
	m.busy[e.ID] = err.Error()
	m.mu.Unlock()
	if said != err.Error() {
		m.log.Warn("a MIG instance's pod has ended, but processes still run on it; it is offered to no pod, handed to none and not destroyed until they end", "instance", e.ID, "pod", e.Pod, "err", err)
	}
	return !was
}

// forgetBusy drops the busy marks of instances no longer recorded.
func (m *Maker) forgetBusy(keep []Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.busy {
		if !slices.ContainsFunc(keep, func(e Entry) bool { return e.ID == id }) {
			delete(m.busy, id)
		}
	}
}

// unmarkBusy forgets that id was busy; was says it had been.
func (m *Maker) unmarkBusy(id string) (was bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, was = m.busy[id]
	delete(m.busy, id)
	return was
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
