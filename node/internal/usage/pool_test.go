package usage

import (
	"fmt"
	"testing"
)

// A share that several containers hold (a DRA claim several pods use)
// is held to its memory summed over them: each may hold all of it
// alone, but together they lose their largest processes, whoever's,
// until what is left fits. A container of its own slice with the same
// numbers is not over.
func TestAPoolIsHeldToItsShareTogether(t *testing.T) {
	share := func(pool string) map[string]Share {
		return map[string]Share{"GPU-0": {MemoryBytes: 4096 * mib, Cores: 30, Pool: pool, Claim: "ns/shared"}}
	}
	a := &Container{ID: "a", Namespace: "ns", Pod: "a", PodUID: "uid-a", Name: "main", Slices: share("c-1-0")}
	b := &Container{ID: "b", Namespace: "ns", Pod: "b", PodUID: "uid-b", Name: "main", Slices: share("c-1-0")}
	lone := &Container{ID: "l", Namespace: "ns", Pod: "l", PodUID: "uid-l", Name: "main", Slices: share("")}
	other := &Container{ID: "o", Namespace: "ns", Pod: "o", PodUID: "uid-o", Name: "main", Slices: share("c-2-0")}
	owners := map[int]*Container{10: a, 11: a, 20: b, 30: lone, 40: other}
	owner := func(pid int) *Container { return owners[pid] }
	totals := map[string]uint64{"GPU-0": 81920 * mib}
	margin := uint64(1024 * mib)
	for _, tc := range []struct {
		name  string
		procs []Process
		kills string // victim:its container
		held  uint64 // MiB past the slices
		stuck string
	}{
		{name: "each within alone, and together", procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 2000 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 2000 * mib}}},
		{name: "each within alone, over together: the largest goes", procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 3000 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 3600 * mib}, {GPU: "GPU-0", PID: 30, UsedBytes: 3600 * mib}},
			kills: "20:b", held: 2504},
		{name: "the largest first, until it fits", procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 2500 * mib}, {GPU: "GPU-0", PID: 11, UsedBytes: 2400 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 2300 * mib}},
			kills: "10:a", held: 3104},
		{name: "as many as it takes, across holders", procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 2600 * mib}, {GPU: "GPU-0", PID: 11, UsedBytes: 2600 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 2600 * mib}},
			kills: "20:b 11:a", held: 3704},
		{name: "another claim's pool is apart", procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 3000 * mib}, {GPU: "GPU-0", PID: 40, UsedBytes: 3600 * mib}}},
		{name: "over by an orphan: its holder is stuck", procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 5500 * mib, Orphaned: true}, {GPU: "GPU-0", PID: 20, UsedBytes: 1000 * mib}},
			kills: "20:b", held: 2404, stuck: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(Sample{Processes: tc.procs, MemoryBytes: totals}, owner, Rules{Mode: Enforce, Margin: margin})
			kills := ""
			for _, k := range v.Kills {
				kills += fmt.Sprintf(" %d:%s", k.Victim.PID, k.Use.Container.ID)
				if k.Use.Container != owners[k.Victim.PID] || !k.Use.Over(margin) {
					t.Errorf("kill %+v: not its container's, or not over", k)
				}
			}
			if kills != "" {
				kills = kills[1:]
			}
			stuck := ""
			for _, u := range v.Stuck {
				stuck += u.Container.ID
			}
			if kills != tc.kills || v.Held["GPU-0"]/mib != tc.held || stuck != tc.stuck {
				t.Errorf("kills %q, held %d MiB, stuck %q; want %q, %d, %q", kills, v.Held["GPU-0"]/mib, stuck, tc.kills, tc.held, tc.stuck)
			}
			for _, u := range v.Uses {
				if u.Container == a || u.Container == b {
					want := uint64(0)
					for _, p := range tc.procs {
						if o := owners[p.PID]; o == a || o == b {
							want += p.UsedBytes
						}
					}
					if u.PoolBytes != want || u.Claim != "ns/shared" {
						t.Errorf("%s: pool holds %d MiB of %s; want %d", u.Container.ID, u.PoolBytes/mib, u.Claim, want/mib)
					}
				}
			}
		})
	}
}
