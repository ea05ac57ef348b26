package usage

import (
	"cmp"
	"slices"
)

// plan is what Decide would end of one use, or of a pool's uses
// together: its processes that may be killed, largest first, and those
// chosen.
type plan struct {
	use Use // a container's; a pool's, its holders' summed
	// members are a pool's holders' uses, nil for a container's own.
	members []Use
	left    uint64    // what the use holds once victims are gone
	live    []Process // not yet chosen, largest first; never orphans
	victims []Process
	// overVictims is how many victims it lost for being over its slice
	// plus the margin; the rest, for a full GPU.
	overVictims int
	stuck       bool // it was to shrink, and only orphans were left
}

func newPlan(u Use) plan {
	p := plan{use: u, left: u.UsedBytes}
	if u.Whole {
		return p // never over: nothing to choose from
	}
	// The largest first; of equals, the newest PID (most likely the one
	// that just grew), so the choice is the same every time. Then the
	// next, until what is left fits: many small processes do not outrun
	// one kill a period.
	for _, pr := range u.Processes {
		if !pr.Orphaned {
			p.live = append(p.live, pr)
		}
	}
	slices.SortFunc(p.live, func(a, b Process) int {
		return cmp.Or(cmp.Compare(b.UsedBytes, a.UsedBytes), cmp.Compare(b.PID, a.PID))
	})
	return p
}

// shrinkTo chooses victims until the use holds at most limit, and says
// whether it was stuck: over, with only orphans left. It returns what
// was freed.
func (p *plan) shrinkTo(limit uint64) uint64 {
	freed := uint64(0)
	for p.left > limit && len(p.live) > 0 {
		pr := p.live[0]
		p.live = p.live[1:]
		p.victims = append(p.victims, pr)
		p.left -= pr.UsedBytes
		freed += pr.UsedBytes
	}
	if p.left > limit {
		p.stuck = true
	}
	return freed
}

// fullGPU holds everyone on gpu to their slice once its processes
// (held in all) take more than room, its memory less the reserve: the
// uses above their slice shrink to it, largest excess first, until the
// GPU fits. It returns what the GPU holds once every victim chosen is
// gone.
func fullGPU(gpu string, held, room uint64, plans []plan) uint64 {
	for i := range plans {
		if plans[i].use.GPU == gpu {
			held -= plans[i].use.UsedBytes - plans[i].left
		}
	}
	if held <= room {
		return held
	}
	var above []int
	for i := range plans {
		p := &plans[i]
		if p.use.GPU == gpu && !p.use.Whole && p.left > p.use.LimitBytes {
			above = append(above, i)
		}
	}
	slices.SortFunc(above, func(a, b int) int {
		pa, pb := &plans[a], &plans[b]
		return cmp.Or(cmp.Compare(pb.left-pb.use.LimitBytes, pa.left-pa.use.LimitBytes), cmp.Compare(pa.use.Container.ID, pb.use.Container.ID))
	})
	for _, i := range above {
		if held <= room {
			break
		}
		p := &plans[i]
		// To its slice, or as little as makes the GPU fit.
		limit := max(p.use.LimitBytes, p.left-min(p.left, held-room))
		held -= p.shrinkTo(limit)
	}
	return held
}
