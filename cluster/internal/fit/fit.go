package fit

import (
	"slices"
	"strings"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Place places req on n, or says why it cannot. It does not change n.
// App containers are placed first, cumulatively; init containers and
// sidecars then fit in spec order against the pod's peak (podmodel's
// rule). The placement is returned in kubelet's order: init containers
// first.
func Place(n Node, req Request, opts Options) (podmodel.Placement, *Reason) {
	return fit(n, req, opts, true)
}

// Fits is Place without building the placement: /filter asks it of every
// node, so it allocates as little as it can.
func Fits(n Node, req Request, opts Options) *Reason {
	_, r := fit(n, req, opts, false)
	return r
}

// scratchGPUs is how many GPUs a node may have for fit's scratch space to
// stay on the stack: fit runs per node per /filter, and must not allocate
// for an ordinary node. scratchMIG is the same for a node whose MIG
// instances count as GPUs (eight GPUs of seven instances each): its
// larger scratch is zeroed only for such a node, since zeroing it for
// every node cost the chained-policy filter a sixth of its time.
const (
	scratchSmall = 8 // most GPU nodes: zeroing 16 cost it a tenth
	scratchGPUs  = 16
	scratchMIG   = 64
)

func fit(n Node, req Request, opts Options, record bool) (podmodel.Placement, *Reason) {
	if req.GPUPolicy.Mutex && !slices.Contains(n.Features, protocol.FeatureMutex) {
		// Its assignment would require the feature, and this node's
		// vgpud would refuse the pod at Allocate.
		return nil, &Reason{Kind: "vgpud too old for mutex", Text: "the node's vgpud does not honour the mutex policy; upgrade it, or leave mutex out"}
	}
	if req.Mode == podmodel.ModeMIG && !n.hasMIG() {
		// Said once per node, not per GPU: most nodes of a cluster
		// have no MIG GPU, and /filter asks every one.
		return nil, &Reason{Kind: "no MIG instance", Text: "the node has no GPU in MIG mode; its GPUs serve shared slices (" + wellknown.AnnotationGPUMode + ": mig asks instances)"}
	}
	left := 0 // GPU containers still to place
	for _, c := range req.Containers {
		if c.GPUs > 0 {
			left++
		}
	}
	// The pod's own peak per GPU, for its later containers; a yes or no
	// for one container has none to keep, and zeroes none.
	var pk []podmodel.Peak
	switch k := len(n.GPUs); {
	case left == 1 && !record:
	case k <= scratchSmall:
		var buf [scratchSmall]podmodel.Peak
		pk = buf[:k]
	case k <= scratchGPUs:
		var buf [scratchGPUs]podmodel.Peak
		pk = buf[:k]
	case k <= scratchMIG:
		var buf [scratchMIG]podmodel.Peak
		pk = buf[:k]
	default:
		pk = make([]podmodel.Peak, k)
	}
	var placed []podmodel.ContainerPlacement
	if record {
		placed = make([]podmodel.ContainerPlacement, len(req.Containers))
	}
	for pass := 0; pass < 2; pass++ {
		initPass := pass == 1
		for ci, c := range req.Containers {
			if c.Kind.BeforeApps() != initPass || c.GPUs == 0 {
				continue
			}
			left--
			// Which GPUs the last container takes matters only to a
			// placement that is kept: for a yes or no, enough candidates do.
			cp, reason := placeContainer(n, &req, opts, c, pk, record, !record && left == 0)
			if reason != nil {
				return nil, reason
			}
			if record {
				placed[ci] = cp
			}
		}
	}
	if !record {
		return nil, nil
	}
	var out podmodel.Placement
	for ci, c := range req.Containers {
		if c.GPUs > 0 {
			out = append(out, placed[ci])
		}
	}
	return out, nil
}

// peakAt is pk[i], or none where fit kept no peaks (pk nil).
func peakAt(pk []podmodel.Peak, i int) podmodel.Peak {
	if pk == nil {
		return podmodel.Peak{}
	}
	return pk[i]
}

// memFor is the MiB container c gets on a GPU of gpuMiB: a share is of
// that.
func memFor(c *podmodel.ContainerRequest, gpuMiB int64, opts Options) int64 {
	switch {
	case c.MemoryMiB > 0:
		return c.MemoryMiB
	case c.MemoryPercent > 0:
		return gpuMiB * int64(c.MemoryPercent) / 100
	default:
		return podmodel.DefaultMemMiB(gpuMiB, opts.DefaultMemPercent)
	}
}

// coresFor is the cores container c gets on GPU g: what it names, else
// the default (podmodel.DefaultCores).
func coresFor(c *podmodel.ContainerRequest, g *CommittedGPU, opts Options) int {
	if c.Cores > 0 {
		return c.Cores
	}
	return podmodel.DefaultCores(g.GPU, opts.DefaultCores)
}

// placeContainer finds GPUs for c on n, adding them to pk and, with
// record, to the placement; with answerOnly it only says whether c fits.
func placeContainer(n Node, req *Request, opts Options, c podmodel.ContainerRequest, pk []podmodel.Peak, record, answerOnly bool) (podmodel.ContainerPlacement, *Reason) {
	var rej rejections
	// A yes-or-no only counts the GPUs that fit, per NUMA node where
	// bound to one (index NUMA+1, so an unknown NUMA node, -1, is one
	// group as in choose); candidates are kept only past that array.
	var cands []candidate
	fitting := 0
	var perNUMA [scratchSmall + 1]int
	switch k := len(n.GPUs); {
	case answerOnly:
	case k <= scratchSmall:
		var buf [scratchSmall]candidate
		cands = buf[:0]
	case k <= scratchGPUs:
		var buf [scratchGPUs]candidate
		cands = buf[:0]
	case k <= scratchMIG:
		var buf [scratchMIG]candidate
		cands = buf[:0]
	default:
		cands = make([]candidate, 0, k)
	}
	// What is the same for every GPU, read once: this loop runs per GPU
	// of every node a /filter considers.
	anySelector := len(req.UseTypes) > 0 || len(req.NoUseTypes) > 0 || len(req.UseUUIDs) > 0 || len(req.NoUseUUIDs) > 0
	wantMIG := req.Mode == podmodel.ModeMIG
	// A mutex slice holds the GPU alone against other pods only: it is
	// not exclusive in the pod's own peak, so the pod's init, sidecar
	// and app containers may share the GPU.
	mutex := req.GPUPolicy.Mutex
	for i := range n.GPUs {
		g := &n.GPUs[i] // not a copy
		switch {
		case !g.Healthy:
			rej.unhealthy++
			continue
		case g.Cordoned:
			rej.cordoned++
			continue
		case anySelector && !selected(g, req):
			rej.selector++
			continue
		case (g.MIG != nil) != wantMIG:
			rej.mode++
			continue
		case g.MIG != nil:
			if c.GPUs != 1 {
				rej.mode++ // a process sees one MIG device
				continue
			}
			k, ok := instanceFits(&c, i, n.GPUs, pk, opts, &rej)
			if !ok {
				continue
			}
			if answerOnly {
				return podmodel.ContainerPlacement{}, nil // one instance is enough
			}
			cands = append(cands, k)
			continue
		case g.Full:
			rej.full++
			continue
		}
		// The pod's own earlier containers on this GPU, if any (usually
		// none: this loop runs per GPU of every node a /filter considers).
		var cur, total podmodel.Usage
		cores := coresFor(&c, g, opts)
		exclusive := podmodel.Exclusive(cores)
		u := podmodel.Usage{MemMiB: memFor(&c, g.MemoryMiB, opts), Cores: cores, Slots: 1, Exclusive: exclusive}
		if pk == nil || pk[i] == (podmodel.Peak{}) {
			total = g.Used.Plus(u)
		} else {
			cur = pk[i].Total()
			total = g.Used.Plus(pk[i].With(u, c.Kind))
		}
		if g.Used.Exclusive || cur.Exclusive || (exclusive && !(g.Used.Idle() && cur.Idle())) || (mutex && !g.Used.Idle()) {
			rej.exclusive++
			continue
		}
		// What the GPU holds beyond its bookings is used memory too.
		freeMem := g.MemoryMiB - g.Used.MemMiB - g.Held - cur.MemMiB
		freeCores := g.GPU.Cores - g.Used.Cores - cur.Cores
		switch {
		case total.Slots > g.Split:
			rej.slot++
		case total.MemMiB+g.Held > g.MemoryMiB:
			rej.mem++
			rej.wantMem = u.MemMiB
			if rej.mem == 1 || freeMem > rej.largestFreeMem || (freeMem == rej.largestFreeMem && g.Held > rej.heldAtLargest) {
				rej.largestFreeMem, rej.heldAtLargest = freeMem, g.Held
			}
			if total.MemMiB <= g.MemoryMiB {
				rej.heldShort++
			}
		case total.Cores > g.GPU.Cores:
			rej.cores++
			rej.wantCores = cores
			if freeCores > rej.largestFreeCores {
				rej.largestFreeCores = freeCores
			}
		default:
			fitting++
			if answerOnly && !req.SingleNUMA {
				if fitting == c.GPUs {
					return podmodel.ContainerPlacement{}, nil // enough: the rest cannot make it a no
				}
				continue
			}
			if b := g.NUMA + 1; answerOnly && b >= 0 && b < len(perNUMA) {
				if perNUMA[b]++; perNUMA[b] == c.GPUs {
					return podmodel.ContainerPlacement{}, nil // enough on one NUMA node
				}
				continue
			}
			load := float64(g.Used.MemMiB+g.Held+cur.MemMiB) / float64(g.MemoryMiB)
			cands = append(cands, candidate{idx: i, usage: u, load: load, numa: g.NUMA, own: !cur.Idle()})
		}
	}
	if answerOnly {
		// Which GPUs the last container takes changes nothing after it:
		// only whether enough fit, on one NUMA node where bound to one.
		switch {
		case fitting < c.GPUs:
			return podmodel.ContainerPlacement{}, rej.reason(c, fitting, false)
		case req.SingleNUMA && !anyNUMAHas(cands, c.GPUs):
			return podmodel.ContainerPlacement{}, rej.reason(c, fitting, true)
		}
		return podmodel.ContainerPlacement{}, nil
	}
	if req.Mode == podmodel.ModeMIG {
		cands = smallest(cands, n.GPUs)
	}
	pick, numaShort := choose(cands, c.GPUs, req, n.Sets)
	if pick == nil {
		return podmodel.ContainerPlacement{}, rej.reason(c, len(cands), numaShort)
	}
	cp := podmodel.ContainerPlacement{Name: c.Name, Kind: c.Kind}
	for _, k := range pick {
		pk[k.idx].Add(k.usage, c.Kind)
		if record {
			// Exclusive only where the cores do not already say so, so a
			// whole-GPU slice reads the same to an older vgpud.
			s := protocol.GPUSlice{UUID: n.GPUs[k.idx].UUID, MemoryMiB: k.usage.MemMiB, Cores: k.usage.Cores,
				Exclusive: req.GPUPolicy.Mutex && !k.usage.Exclusive}
			if r := n.GPUs[k.idx].MIG; r != nil {
				s.Exclusive, s.MIG, s.Make = false, true, r.OnDemand // held whole by the hardware
			}
			cp.GPUs = append(cp.GPUs, s)
		}
	}
	return cp, nil
}

// selected applies the type and UUID selectors, without allocating: it
// runs per GPU of every node a /filter considers.
func selected(g *CommittedGPU, req *Request) bool {
	if len(req.UseTypes) == 0 && len(req.NoUseTypes) == 0 && len(req.UseUUIDs) == 0 && len(req.NoUseUUIDs) == 0 {
		return true
	}
	matchType := func(list []string) bool {
		for _, t := range list {
			if t = strings.TrimSpace(t); t != "" && containsFold(g.Model, t) {
				return true
			}
		}
		return false
	}
	matchUUID := func(list []string) bool {
		for _, u := range list {
			// A GPU in MIG mode by its own UUID names its instances.
			// A possible instance is no device: by its name, a pod
			// could choose where on the GPU it is made, and fragment it.
			own := g.MIG == nil || !g.MIG.OnDemand
			if u = strings.TrimSpace(u); (own && strings.EqualFold(u, g.UUID)) || (g.MIG != nil && strings.EqualFold(u, g.MIG.GPU)) {
				return true
			}
		}
		return false
	}
	if len(req.UseTypes) > 0 && !matchType(req.UseTypes) {
		return false
	}
	if matchType(req.NoUseTypes) || matchUUID(req.NoUseUUIDs) {
		return false
	}
	return len(req.UseUUIDs) == 0 || matchUUID(req.UseUUIDs)
}

// containsFold is strings.Contains under Unicode case folding, without
// lowering copies of either string.
func containsFold(s, substr string) bool {
	for i := 0; i+len(substr) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(substr)], substr) {
			return true
		}
	}
	return false
}
