package core

import (
	"fmt"
	"sort"
	"strings"
)

// Score rates a node 0..10 for a pod whose footprint there is fp. Binpack
// prefers a node already in use, then the one whose GPU memory is fuller
// after placement; spread prefers an idle node, then the emptier. Use
// counts before fullness because one pod moves a big node's fullness by
// less than a step: by fullness alone, an empty node and one holding a
// few small pods tie, and kube-scheduler's own scores, which favour
// emptier nodes, would decide.
func Score(n Node, fp []Usage, policy string) int {
	var used, total int64
	inUse := false
	for i, g := range n.GPUs {
		total += g.MemoryMiB
		used += g.Used.MemMiB
		inUse = inUse || !g.Used.idle()
		if i < len(fp) {
			used += fp[i].MemMiB
		}
	}
	if total == 0 {
		return 0
	}
	full := min(int(used*9/total), 9) // 0..9 after placement
	switch {
	case policy == Spread && !inUse:
		return 10
	case policy == Spread:
		return 9 - full
	case !inUse:
		return 0
	}
	return 1 + full
}

// Summarize turns per-node reasons into one line for a pod Event, e.g.
// "0/12 nodes fit: 9 insufficient gpumem (largest free 6000 MiB < 10000), 3 no matching gpu".
// Kinds are ordered by count, then name; the detail shown for a kind is
// that of its first node by name, so the line is deterministic.
func Summarize(total, fitting int, reasons map[string]Reason) string {
	type group struct {
		kind   string
		count  int
		detail string
	}
	names := make([]string, 0, len(reasons))
	for n := range reasons {
		names = append(names, n)
	}
	sort.Strings(names)
	byKind := map[string]*group{}
	var groups []*group
	for _, n := range names {
		r := reasons[n]
		g, ok := byKind[r.Kind]
		if !ok {
			g = &group{kind: r.Kind, detail: detailOf(r.Text)}
			byKind[r.Kind] = g
			groups = append(groups, g)
		}
		g.count++
	}
	sort.SliceStable(groups, func(a, b int) bool {
		if groups[a].count != groups[b].count {
			return groups[a].count > groups[b].count
		}
		return groups[a].kind < groups[b].kind
	})
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		s := fmt.Sprintf("%d %s", g.count, g.kind)
		if g.detail != "" {
			s += " (" + g.detail + ")"
		}
		parts = append(parts, s)
	}
	line := fmt.Sprintf("%d/%d nodes fit", fitting, total)
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, ", ")
	}
	return line
}

// detailOf keeps the part of a reason after "; " — the numbers.
func detailOf(text string) string {
	if _, after, ok := strings.Cut(text, "; "); ok {
		return after
	}
	return ""
}
