package fit

import (
	"math/bits"
	"slices"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// What follows chooses a container's GPUs among those that fit (the
// candidates placeContainer collected), by the pod's GPU policy chain.

type candidate struct {
	idx   int
	usage podmodel.Usage
	load  float64
	numa  int
	own   bool // the pod's earlier containers are on it
}

// choose takes count candidates by GPU policy: spread prefers the least
// loaded GPUs, binpack the most loaded; ties go to the lower index. With
// SingleNUMA all come from one NUMA node, the first in that order with
// enough, and numaShort reports that only this rule failed. The policy's
// numa first does the same where some NUMA node has enough, and takes
// them across nodes where none has; numa after the load key sends only
// ties in load to the NUMA node of the first pick.
func choose(cands []candidate, count int, req *Request, sets []Set) (pick []candidate, numaShort bool) {
	if len(cands) < count {
		return nil, false
	}
	binpack := req.GPUPolicy.Load == podmodel.Binpack
	mutex := req.GPUPolicy.Mutex
	byLoad := func(a, b candidate) int {
		if mutex && a.own != b.own {
			// A mutex pod's GPU is charged whole and kept from others: its
			// next container joins it before taking another, whatever the
			// load key says.
			if a.own {
				return -1
			}
			return 1
		}
		if a.load != b.load {
			if (a.load > b.load) == binpack {
				return -1
			}
			return 1
		}
		return 0
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := byLoad(a, b); c != 0 {
			return c
		}
		return a.idx - b.idx
	})
	if count == 1 {
		return cands[:1], false
	}
	// A mutex pod's GPUs already its own come first, before any set or
	// NUMA node: each more it takes is held and charged whole.
	ownFirst := mutex && cands[0].own
	if req.GPUPolicy.Topology && !ownFirst {
		if pick := closestSet(cands, count, req.SingleNUMA, sets); pick != nil {
			return pick, false
		}
	}
	switch {
	case req.SingleNUMA || (!ownFirst && (req.GPUPolicy.NUMA == podmodel.NUMAFirst || req.GPUPolicy.Topology)):
		if group := oneNUMA(cands, count); group != nil {
			return group, false
		}
		if req.SingleNUMA {
			return nil, true
		}
	case req.GPUPolicy.NUMA == podmodel.NUMATiebreak:
		first := cands[0].numa
		slices.SortStableFunc(cands, func(a, b candidate) int {
			if c := byLoad(a, b); c != 0 {
				return c
			}
			switch {
			case a.numa == first && b.numa != first:
				return -1
			case a.numa != first && b.numa == first:
				return 1
			}
			return 0
		})
	}
	return cands[:count], false
}

// closestSet is count candidates from the closest connected set that has
// enough of them (NVLink, then one PCIe switch; with singleNUMA, enough on
// one NUMA node): of the sets at that link, the one holding the earliest
// candidate, and of it the earliest candidates. nil if no set has enough;
// cands keep their order then. Sets are bitmasks over the node's GPUs, so
// each is judged with a few bit operations: this runs per node of every
// /filter.
func closestSet(cands []candidate, count int, singleNUMA bool, sets []Set) []candidate {
	var all uint64
	var byNUMA [scratchGPUs]struct {
		numa int
		mask uint64
	}
	numas := 0
	for _, c := range cands {
		if c.idx >= 64 {
			continue // beyond a mask: in no set
		}
		all |= 1 << c.idx
		k := 0
		for k < numas && byNUMA[k].numa != c.numa {
			k++
		}
		if k == numas {
			if numas == len(byNUMA) {
				return nil // more NUMA nodes than any machine has
			}
			byNUMA[k].numa = c.numa
			numas++
		}
		byNUMA[k].mask |= 1 << c.idx
	}
	for _, link := range []string{protocol.LinkNVLink, protocol.LinkPCIeSwitch} {
		best, bestMask := len(cands), uint64(0)
		for _, s := range sets {
			m := s.Mask & all
			if s.Link != link || bits.OnesCount64(m) < count {
				continue
			}
			if singleNUMA {
				var ok uint64
				for k := range numas {
					if on := m & byNUMA[k].mask; bits.OnesCount64(on) >= count {
						ok |= on
					}
				}
				if m = ok; m == 0 {
					continue
				}
			}
			for r, c := range cands[:best] {
				if c.idx < 64 && m&(1<<c.idx) != 0 {
					best, bestMask = r, m
					break
				}
			}
		}
		if bestMask == 0 {
			continue
		}
		group := toFront(cands, func(c candidate) bool { return c.idx < 64 && bestMask&(1<<c.idx) != 0 })
		if singleNUMA {
			return oneNUMA(group, count)
		}
		return group[:count]
	}
	return nil
}

// anyNUMAHas says whether count of cands are on one NUMA node.
func anyNUMAHas(cands []candidate, count int) bool {
	for i, c := range cands {
		n := 0
		for _, o := range cands[i:] {
			if o.numa == c.numa {
				n++
			}
		}
		if n >= count {
			return true
		}
	}
	return false
}

// toFront moves the candidates keep holds to the front of cands, in their
// order, and returns them; it does not allocate.
func toFront(cands []candidate, keep func(candidate) bool) []candidate {
	k := 0
	for i := range cands {
		if keep(cands[i]) {
			x := cands[i]
			copy(cands[k+1:i+1], cands[k:i])
			cands[k] = x
			k++
		}
	}
	return cands[:k]
}

// oneNUMA is the first count candidates, in their order, of the NUMA
// node of the first candidate whose node has count; nil if none has. It
// moves them to the front of cands rather than allocate: fit runs per
// node of every /filter.
func oneNUMA(cands []candidate, count int) []candidate {
	for _, c := range cands {
		n := 0
		for _, o := range cands {
			if o.numa == c.numa {
				n++
			}
		}
		if n < count {
			continue
		}
		numa := c.numa
		return toFront(cands, func(o candidate) bool { return o.numa == numa })[:count]
	}
	return nil
}
