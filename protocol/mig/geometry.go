// Package mig is the geometry of MIG: where a GPU instance may sit among
// a GPU's memory slices, given the instances already there. It is pure,
// so the mock backend that enforces it and the leader that will plan
// with it share one rule.
package mig

// Span is where a GPU instance sits: Size memory slices from Start,
// as NVML gives it (nvmlGpuInstancePlacement_t).
type Span struct {
	Start, Size int
}

// End is the first slice after p.
func (p Span) End() int { return p.Start + p.Size }

// Overlaps reports whether p and q share a memory slice.
func (p Span) Overlaps(q Span) bool {
	return p.Start < q.End() && q.Start < p.End()
}

// Free reports whether p overlaps none of taken.
func Free(p Span, taken []Span) bool {
	for _, t := range taken {
		if p.Overlaps(t) {
			return false
		}
	}
	return true
}

// FirstFree is the first of a profile's possible placements (NVML's
// order) that overlaps none of taken; ok is false when none is left.
func FirstFree(possible, taken []Span) (p Span, ok bool) {
	for _, p := range possible {
		if Free(p, taken) {
			return p, true
		}
	}
	return Span{}, false
}

// Allowed reports whether p is one of a profile's possible placements:
// NVML refuses any other, even a free one.
func Allowed(p Span, possible []Span) bool {
	for _, q := range possible {
		if q == p {
			return true
		}
	}
	return false
}
