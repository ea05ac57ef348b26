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
	// Going: the pod is ending already (an earlier preemption's victim):
	// what it holds counts as free, and it is no victim.
	Going bool
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
	var forced, lower []int // indexes into residents
	var going []int
	for i, r := range residents {
		switch {
		case r.Going:
			going = append(going, i)
		case slices.Contains(must, r.Key) && r.Priority >= prio:
			return Preemption{}, false // never a victim, whoever chose it
		case slices.Contains(must, r.Key):
			forced = append(forced, i)
		case r.Priority < prio:
			lower = append(lower, i)
		}
	}
	slices.SortStableFunc(lower, func(a, b int) int {
		return cmp.Or(cmp.Compare(residents[a].Priority, residents[b].Priority), cmp.Compare(residents[a].Key, residents[b].Key))
	})
	t := newTally(bare, residents)
	for _, i := range append(slices.Clone(going), forced...) {
		t.remove(i)
	}
	fits := func() bool { return Fits(t.node(), req, opts) == nil }
	if fits() {
		return preemption(residents, forced), true
	}
	// Where even every lower resident gone leaves no room, nothing helps.
	for _, i := range lower {
		t.remove(i)
	}
	room := fits()
	for _, i := range lower {
		t.restore(i)
	}
	if !room {
		return Preemption{}, false
	}
	var best Preemption
	found := false
	try := func(cands []int) {
		var taken []int
		ok := false
		for _, i := range cands {
			t.remove(i)
			taken = append(taken, i)
			if ok = fits(); ok {
				break
			}
		}
		if !ok {
			for _, i := range taken {
				t.restore(i)
			}
			return
		}
		// Spare what the fit does without, the highest priority first.
		var kept []int
		for k := len(taken) - 1; k >= 0; k-- {
			t.restore(taken[k])
			if !fits() {
				t.remove(taken[k])
				kept = append(kept, taken[k])
			}
		}
		for _, i := range kept {
			t.restore(i)
		}
		slices.Reverse(kept)
		if p := preemption(residents, append(slices.Clone(forced), kept...)); !found || p.Better(best) {
			best, found = p, true
		}
	}
	for _, uuid := range gpusOf(residents, lower) {
		var on []int
		for _, i := range lower {
			if holds(residents[i].Placement, uuid) {
				on = append(on, i)
			}
		}
		try(on)
	}
	// A pod of one GPU needs one GPU freed, which the tries above weigh
	// each; more GPUs may need victims across them.
	if !found || gpusAsked(req) > 1 {
		try(lower)
	}
	return best, found
}

// gpusAsked is how many GPUs req's containers ask in all.
func gpusAsked(req Request) int {
	n := 0
	for _, c := range req.Containers {
		n += c.GPUs
	}
	return n
}

// tally is a node's usage by its residents, kept as they are removed and
// restored, so that each fit costs a pass over the GPUs, not a recount
// of every resident.
type tally struct {
	bare    Node
	scratch []CommittedGPU
	sum     []podmodel.Usage // numbers summed; the flags are counted
	excl    []int
	mutex   []int
	foot    [][]gpuUse // each resident's total per GPU it holds
	removed []bool
}

type gpuUse struct {
	i int
	u podmodel.Usage
}

func newTally(bare Node, residents []Resident) *tally {
	k := len(bare.GPUs)
	t := &tally{bare: bare, scratch: make([]CommittedGPU, k), sum: make([]podmodel.Usage, k), excl: make([]int, k), mutex: make([]int, k),
		foot: make([][]gpuUse, len(residents)), removed: make([]bool, len(residents))}
	peaks := make([]podmodel.Peak, k)
	for r := range residents {
		clear(peaks)
		residents[r].Placement.AddPeaks(peaks, bare.index)
		for i := range peaks {
			if u := peaks[i].Total(); !u.Idle() || u.Exclusive || u.Mutex {
				t.foot[r] = append(t.foot[r], gpuUse{i, u})
			}
		}
		t.add(r, 1)
	}
	return t
}

func (t *tally) remove(r int) {
	if !t.removed[r] {
		t.removed[r] = true
		t.add(r, -1)
	}
}

func (t *tally) restore(r int) {
	if t.removed[r] {
		t.removed[r] = false
		t.add(r, 1)
	}
}

func (t *tally) add(r, sign int) {
	for _, g := range t.foot[r] {
		s := &t.sum[g.i]
		s.MemMiB += int64(sign) * g.u.MemMiB
		s.Cores += sign * g.u.Cores
		s.Slots += sign * g.u.Slots
		if g.u.Exclusive {
			t.excl[g.i] += sign
		}
		if g.u.Mutex {
			t.mutex[g.i] += sign
		}
	}
}

// node is the bare node with what the residents left hold, as Add would
// make it; shared scratch, valid until the next call.
func (t *tally) node() Node {
	n := t.bare
	copy(t.scratch, t.bare.GPUs)
	n.GPUs = t.scratch
	for i := range n.GPUs {
		u := t.sum[i]
		u.Exclusive, u.Mutex = t.excl[i] > 0, t.mutex[i] > 0
		n.GPUs[i].Used = n.GPUs[i].Used.Plus(u)
	}
	for i := range n.GPUs {
		if n.GPUs[i].MIG != nil && n.GPUs[i].MIG.OnDemand && !n.GPUs[i].Used.Idle() {
			n.block(i)
		}
	}
	return n
}

// gpusOf lists the GPUs the residents of which hold, in first-seen order.
func gpusOf(residents []Resident, which []int) []string {
	var out []string
	for _, i := range which {
		for _, c := range residents[i].Placement {
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

// preemption lists the victims' keys with their highest priority.
func preemption(residents []Resident, victims []int) Preemption {
	p := Preemption{Victims: []string{}}
	for k, i := range victims {
		p.Victims = append(p.Victims, residents[i].Key)
		if k == 0 || residents[i].Priority > p.Highest {
			p.Highest = residents[i].Priority
		}
	}
	return p
}
