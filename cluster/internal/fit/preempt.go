package fit

import (
	"cmp"
	"slices"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Resident is a pod booked on a node, as preemption weighs it.
type Resident struct {
	Key             string // the pod's UID
	Namespace, Name string
	Priority        int32
	Placement       podmodel.Placement
}

// Preemption is what preempting on one node takes: its victims' keys,
// lowest priority first, and the highest priority among them.
type Preemption struct {
	Victims []string
	Highest int32
}

// Better says whether p costs less than o: fewer victims, then a lower
// highest priority among them.
func (p Preemption) Better(o Preemption) bool {
	if len(p.Victims) != len(o.Victims) {
		return len(p.Victims) < len(o.Victims)
	}
	return p.Highest < o.Highest
}

// Preempt is the fewest residents of bare (the node's GPUs with nothing
// booked) whose slices, once freed, let req fit by fit's own rules
// (memory, cores, slots, mode, MIG, topology), each of a priority below
// prio; must are victims chosen already (kube-scheduler's, for the
// resources it sees), counted in and never spared (a key of no resident
// is the caller's to keep). ok is false where no such set exists; the
// set is must alone where req fits once those are gone (empty where it
// fits already). A victim is never of prio or higher, whatever must
// says.
//
// It tries, for each GPU, the lower residents on that GPU alone, and the
// node's lower residents together; each lowest priority first until req
// fits, then spares every victim the fit does without (highest priority
// first). The cheapest result wins: a request for one GPU empties no
// more than one GPU's worth.
func Preempt(bare Node, residents []Resident, must []string, prio int32, req Request, opts Options) (Preemption, bool) {
	var forced, lower []Resident
	for _, r := range residents {
		switch {
		case slices.Contains(must, r.Key) && r.Priority >= prio:
			return Preemption{}, false // never a victim, whoever chose it
		case slices.Contains(must, r.Key):
			forced = append(forced, r)
		case r.Priority < prio:
			lower = append(lower, r)
		}
	}
	slices.SortStableFunc(lower, func(a, b Resident) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Key, b.Key))
	})
	removed := make(map[string]bool, len(residents))
	for _, r := range forced {
		removed[r.Key] = true
	}
	fits := func() bool { return Fits(without(bare, residents, removed), req, opts) == nil }
	if fits() {
		return preemption(forced), true
	}
	var best Preemption
	found := false
	try := func(cands []Resident) {
		var taken []Resident
		for _, r := range cands {
			removed[r.Key] = true
			taken = append(taken, r)
			if fits() {
				break
			}
		}
		if !fits() {
			for _, r := range taken {
				delete(removed, r.Key)
			}
			return
		}
		// Spare what the fit does without, the highest priority first.
		var kept []Resident
		for i := len(taken) - 1; i >= 0; i-- {
			delete(removed, taken[i].Key)
			if !fits() {
				removed[taken[i].Key] = true
				kept = append(kept, taken[i])
			}
		}
		for _, r := range kept {
			delete(removed, r.Key)
		}
		slices.Reverse(kept)
		if p := preemption(append(slices.Clone(forced), kept...)); !found || p.Better(best) {
			best, found = p, true
		}
	}
	for _, uuid := range gpusOf(lower) {
		var on []Resident
		for _, r := range lower {
			if holds(r.Placement, uuid) {
				on = append(on, r)
			}
		}
		try(on)
	}
	try(lower)
	return best, found
}

// without is bare with every resident's placement booked but removed's.
func without(bare Node, residents []Resident, removed map[string]bool) Node {
	n := bare
	n.GPUs = slices.Clone(bare.GPUs)
	for _, r := range residents {
		if !removed[r.Key] {
			Add(&n, r.Placement)
		}
	}
	return n
}

// gpusOf lists the GPUs the residents hold, in first-seen order.
func gpusOf(residents []Resident) []string {
	var out []string
	for _, r := range residents {
		for _, c := range r.Placement {
			for _, s := range c.GPUs {
				if !slices.Contains(out, s.UUID) {
					out = append(out, s.UUID)
				}
			}
		}
	}
	return out
}

func holds(p podmodel.Placement, uuid string) bool {
	for _, c := range p {
		for _, s := range c.GPUs {
			if s.UUID == uuid {
				return true
			}
		}
	}
	return false
}

// preemption lists victims' keys with their highest priority.
func preemption(victims []Resident) Preemption {
	p := Preemption{}
	for i, v := range victims {
		p.Victims = append(p.Victims, v.Key)
		if i == 0 || v.Priority > p.Highest {
			p.Highest = v.Priority
		}
	}
	return p
}
