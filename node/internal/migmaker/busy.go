package migmaker

import "slices"

// Busy says whether processes of an ended pod keep instance id.
func (m *Maker) Busy(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.busy[id]
	return ok
}

// markBusy notes that processes keep e (err says which), saying so when
// what keeps it changed; the first mark is a change to the pass, since
// the inventory then hides the instance.
func (m *Maker) markBusy(p *pass, e Entry, err error) {
	m.mu.Lock()
	said, was := m.busy[e.ID]
	m.busy[e.ID] = err.Error()
	m.mu.Unlock()
	if said != err.Error() {
		m.log.Warn("a MIG instance's pod has ended, but processes still run on it; it is offered to no pod, handed to none and not destroyed until they end", "instance", e.ID, "pod", e.Pod, "err", err)
	}
	if !was {
		p.changed = true
	}
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
