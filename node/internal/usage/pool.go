package usage

import "cmp"

// units are the plans of uses, in their order: one per container's own
// slice, and one per pool on a GPU for its holders together, which
// shows each holder what the pool holds (Use.PoolBytes). A share several
// containers hold is held to its memory summed over them, as their
// claim asked it once; each may use all of it alone.
func units(uses []Use) []plan {
	type key struct{ pool, gpu string }
	sums := map[key]*Use{}
	for _, u := range uses {
		if u.Pool == "" {
			continue
		}
		k := key{u.Pool, u.GPU}
		if sums[k] == nil {
			sums[k] = &Use{}
		}
		sums[k].PoolBytes += u.UsedBytes
		sums[k].Holders++
	}
	var plans []plan
	at := map[key]int{}
	for i := range uses {
		u := &uses[i]
		if u.Pool == "" {
			plans = append(plans, newPlan(*u))
			continue
		}
		k := key{u.Pool, u.GPU}
		u.PoolBytes, u.Holders = sums[k].PoolBytes, sums[k].Holders
		j, ok := at[k]
		if !ok {
			j = len(plans)
			at[k] = j
			plans = append(plans, plan{})
		}
		plans[j].members = append(plans[j].members, *u)
	}
	for _, j := range at {
		members := plans[j].members
		pool := members[0]
		pool.UsedBytes, pool.Processes, pool.SMPercent = 0, nil, -1
		for _, m := range members {
			pool.UsedBytes += m.UsedBytes
			pool.Processes = append(pool.Processes, m.Processes...)
			pool.LimitBytes = max(pool.LimitBytes, m.LimitBytes)
			if m.SMPercent >= 0 {
				pool.SMPercent = max(pool.SMPercent, 0) + m.SMPercent
			}
		}
		plans[j] = newPlan(pool)
		plans[j].members = members
	}
	return plans
}

// holder is the use of the container that runs pid, of p's.
func (p *plan) holder(pid int) Use {
	for _, m := range p.members {
		for _, pr := range m.Processes {
			if pr.PID == pid {
				return m
			}
		}
	}
	return p.use
}

// payer is whose pod is charged what p holds past its slice: a pool's
// largest holder (they share a claim, so a namespace).
func (p *plan) payer() Use {
	if len(p.members) == 0 {
		return p.use
	}
	best := p.members[0]
	for _, m := range p.members[1:] {
		if c := cmp.Compare(m.UsedBytes, best.UsedBytes); c > 0 || (c == 0 && m.Container.ID < best.Container.ID) {
			best = m
		}
	}
	return best
}

// stuckUses are the uses to end once p is stuck: a pool's holders whose
// orphans hold what is over, or, where none is known, every holder.
func (p *plan) stuckUses() []Use {
	if len(p.members) == 0 {
		return []Use{p.use}
	}
	var out []Use
	for _, m := range p.members {
		for _, pr := range m.Processes {
			if pr.Orphaned {
				out = append(out, m)
				break
			}
		}
	}
	if len(out) == 0 {
		return p.members
	}
	return out
}
