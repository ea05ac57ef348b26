package deviceplugin

import (
	"cmp"
	"slices"
)

// preferred picks size device IDs from available. It takes one slice of
// each GPU in want (the pod's assignment) when they are available, and
// otherwise distinct GPUs on as few NUMA nodes as it can, the fullest
// first; mustInclude always comes first.
func preferred(available, mustInclude []string, size int, want []string, numa map[string]int) []string {
	out := slices.Clone(mustInclude)
	used := map[string]bool{} // GPUs already in out
	for _, id := range out {
		uuid, _ := splitID(id)
		used[uuid] = true
	}
	byGPU := map[string][]string{}
	for _, id := range available {
		if slices.Contains(mustInclude, id) {
			continue
		}
		uuid, _ := splitID(id)
		byGPU[uuid] = append(byGPU[uuid], id)
	}
	take := func(uuid string) bool {
		if len(out) >= size || used[uuid] || len(byGPU[uuid]) == 0 {
			return false
		}
		out = append(out, byGPU[uuid][0])
		used[uuid] = true
		return true
	}
	for _, uuid := range want {
		take(uuid)
	}
	if len(out) < size {
		// Group the remaining GPUs by NUMA node; fill from the node that
		// already holds a chosen GPU, then the one with the most candidates,
		// so a multi-GPU request stays on one socket.
		perNode := map[int][]string{}
		for uuid := range byGPU {
			if !used[uuid] {
				perNode[numa[uuid]] = append(perNode[numa[uuid]], uuid)
			}
		}
		nodes := make([]int, 0, len(perNode))
		for n := range perNode {
			slices.Sort(perNode[n])
			nodes = append(nodes, n)
		}
		home := map[int]bool{} // NUMA nodes already holding a chosen GPU
		for uuid := range used {
			home[numa[uuid]] = true
		}
		slices.SortFunc(nodes, func(a, b int) int {
			return cmp.Or(-cmp.Compare(b2i(home[a]), b2i(home[b])), cmp.Compare(len(perNode[b]), len(perNode[a])), cmp.Compare(a, b))
		})
		for _, n := range nodes {
			for _, uuid := range perNode[n] {
				take(uuid)
			}
		}
	}
	// Fewer GPUs than asked: kubelet's request is for slices, so fill
	// with more slices rather than answer short.
	for _, id := range available {
		if len(out) >= size {
			break
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
