package migmaker

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/mig"
)

// pass is what one Reconcile has decided so far: the entries kept, in
// the record's order, the errors met, and whether what is made (changed)
// or the record (dirty) changed.
type pass struct {
	keep           []Entry
	errs           []error
	changed, dirty bool
}

// hold keeps e, with err, if any, among the pass's errors.
func (p *pass) hold(e Entry, err error) {
	p.keep = append(p.keep, e)
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// Reconcile makes each instance want names that is not made, and
// destroys each made instance no pod holds (held: every instance a pod
// that has not ended is booked on, known to the catalog or not), after
// settling what a crash cut short. Every instance is tried; the errors
// are joined. changed says whether what is made changed.
func (m *Maker) Reconcile(want map[string]Demand, held map[string]string) (changed bool, err error) {
	m.run.Lock()
	defer m.run.Unlock()
	entries := m.snapshot()
	p := &pass{keep: entries[:0]}
	for i, e := range entries {
		cur, ok := m.lookAgain(p, e, held)
		if !ok {
			continue
		}
		if cur.Made == nil {
			settled, ok, err := m.settle(cur)
			if err != nil {
				p.hold(cur, err)
				continue
			}
			p.dirty = true
			if !ok {
				continue
			}
			cur, p.changed = settled, true
		}
		if pod, isHeld := held[cur.ID]; isHeld {
			m.handOver(p, cur, pod)
		} else {
			m.release(p, cur, entries[i+1:])
		}
	}
	m.forgetBusy(p.keep)
	if p.dirty {
		if err := m.commit(p.keep, p.changed); err != nil {
			return p.changed, errors.Join(append(p.errs, err)...)
		}
	}
	if err := m.makeWanted(p, want); err != nil {
		return p.changed, errors.Join(append(p.errs, err)...)
	}
	if p.changed {
		m.tell()
	}
	return p.changed, errors.Join(p.errs...)
}

// lookAgain checks e, if made and not checked since the start or the
// last Recheck, against its GPU: an instance in the record may be gone
// (the host rebooted, the GPU was reset), and its IDs another's. ok: e,
// with the IDs as the driver has them now, goes on to be settled, handed
// over or released; otherwise the pass has dealt with it.
func (m *Maker) lookAgain(p *pass, e Entry, held map[string]string) (_ Entry, ok bool) {
	if e.Made == nil || m.isChecked(e.ID) {
		return e, true
	}
	found, ok, err := m.drv.Find(e.Parent, e.Profile, mig.Span{Start: e.Start, Size: e.Size})
	switch {
	case err != nil:
		p.hold(e, fmt.Errorf("instance %s: %w", e.ID, err))
		return e, false
	case ok && found.UUID == "" && found.GI == e.Made.GI && e.Destroying:
		// A destroy cut short between the compute and the GPU
		// instance: finish it, or its room is lost for good.
		if err := m.drv.DestroyHalfMade(e.Parent, found.GI); err != nil {
			p.hold(e, fmt.Errorf("instance %s, destroyed in half: %w", e.ID, err))
			return e, false
		}
		m.log.Info("destroyed a MIG instance destroyed in half before", "instance", e.ID, "gpu", e.Parent, "gi", found.GI)
		p.changed, p.dirty = true, true
		return e, false
	case !ok || found.UUID != e.Made.UUID:
		m.log.Warn("a MIG instance vgpud made is gone (the host rebooted, or the GPU was reset); forgotten", "instance", e.ID, "uuid", e.Made.UUID, "pod", e.Pod)
		p.changed, p.dirty = true, true
		return e, false
	}
	if *e.Made != found {
		e.Made, p.dirty = &found, true
	}
	m.check(e.ID)
	if _, isHeld := held[e.ID]; isHeld {
		// Waiters may now be handed it. (One no pod holds is being
		// destroyed: a destroy that keeps failing looks again each
		// pass, quietly.)
		p.changed = true
		m.log.Info("a MIG instance vgpud made is there still", "instance", e.ID, "uuid", found.UUID, "pod", e.Pod)
	}
	return e, true
}

// handOver keeps e, made, for pod, which holds it: the next pod booked
// on a made instance takes it as it is, once no process of the one
// before runs on it.
func (m *Maker) handOver(p *pass, e Entry, pod string) {
	if e.Pod != pod {
		if err := m.drv.InUse(e.Parent, *e.Made); errors.Is(err, gpu.ErrInUse) {
			m.markBusy(p, e, err)
			p.hold(e, nil)
			return
		}
		e.Pod, p.changed, p.dirty = pod, true, true
	}
	if e.Destroying {
		e.Destroying, p.dirty = false, true // held again before it went
	}
	if m.unmarkBusy(e.ID) {
		p.changed = true
	}
	p.hold(e, nil)
}

// release destroys e, made, which no pod holds, unless a process still
// runs on it; rest are the entries the pass has not reached yet.
func (m *Maker) release(p *pass, e Entry, rest []Entry) {
	if err := m.drv.InUse(e.Parent, *e.Made); errors.Is(err, gpu.ErrInUse) {
		m.markBusy(p, e, err)
		if e.Destroying {
			// Its MIG device is there, so it is whole: no destroy is
			// under way while the process lives.
			e.Destroying, p.dirty = false, true
		}
		p.hold(e, nil)
		return
	}
	begun := e.Destroying
	if !begun {
		e.Destroying = true
		// The record as this pass has it so far, this entry marked:
		// what the pass dropped stays dropped should its end not be
		// written.
		if err := m.commit(append(append(slices.Clone(p.keep), e), rest...), false); err != nil {
			e.Destroying = false
			p.hold(e, fmt.Errorf("instance %s: %w", e.ID, err))
			return
		}
	}
	gone, err := m.drv.Destroy(e.Parent, e.Profile, mig.Span{Start: e.Start, Size: e.Size}, *e.Made, begun)
	switch {
	case errors.Is(err, gpu.ErrInUse): // a process came between: nothing was destroyed
		m.markBusy(p, e, err)
		e.Destroying, p.dirty = false, true
		p.hold(e, nil)
	case err != nil:
		// Perhaps destroyed in half: looked at again, as after a start,
		// and handed to no pod meanwhile.
		m.uncheck(e.ID)
		p.hold(e, fmt.Errorf("instance %s (%s), made for %s: %w", e.ID, e.Made.UUID, e.Pod, err))
	default:
		m.unmarkBusy(e.ID)
		p.changed, p.dirty = true, true
		m.log.Info("destroyed a MIG instance", "instance", e.ID, "uuid", e.Made.UUID, "pod", e.Pod, "already gone", gone)
	}
}

// makeWanted makes each instance want names that the pass does not keep,
// writing its intent to the record first. Its error is one writing the
// record, which ends the pass; a make that fails is among the pass's.
func (m *Maker) makeWanted(p *pass, want map[string]Demand) error {
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if slices.ContainsFunc(p.keep, func(e Entry) bool { return e.ID == id }) {
			continue
		}
		w := want[id]
		p.keep = append(p.keep, Entry{ID: id, Parent: w.Parent, Profile: w.Profile, Start: w.At.Start, Size: w.At.Size, Pod: w.Pod})
		if err := m.commit(p.keep, false); err != nil { // the intent, before the make
			return err
		}
		made, err := m.drv.Make(w.Parent, w.Profile, w.At)
		if err != nil {
			p.keep = p.keep[:len(p.keep)-1]
			p.errs = append(p.errs, fmt.Errorf("make %s for %s: %w", id, w.Pod, err))
			if err := m.commit(p.keep, false); err != nil {
				return err
			}
			continue
		}
		p.keep[len(p.keep)-1].Made = &made
		m.check(id)
		p.changed = true
		if err := m.commit(p.keep, true); err != nil {
			return err
		}
		m.log.Info("made a MIG instance", "instance", id, "uuid", made.UUID, "pod", w.Pod)
	}
	return nil
}

// settle finds what became of an intended instance (e.Made nil): made
// whole, it is e made (ok); made in half, it is destroyed; not made,
// it is dropped.
func (m *Maker) settle(e Entry) (Entry, bool, error) {
	found, ok, err := m.drv.Find(e.Parent, e.Profile, mig.Span{Start: e.Start, Size: e.Size})
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
