package usage

import (
	"testing"
)

const mib = 1 << 20

func TestDecide(t *testing.T) {
	a := &Container{ID: "a", Namespace: "ns", Pod: "a", Name: "main", Slices: map[string]Share{
		"GPU-0": {MemoryBytes: 1000 * mib, Cores: 30},
		"GPU-1": {MemoryBytes: 2000 * mib, Cores: 30},
	}}
	b := &Container{ID: "b", Namespace: "ns", Pod: "b", Name: "main", Slices: map[string]Share{"GPU-0": {MemoryBytes: 500 * mib}}}
	whole := &Container{ID: "w", Namespace: "ns", Pod: "w", Name: "main", Slices: map[string]Share{"GPU-2": {MemoryBytes: 40960 * mib}}}
	totals := map[string]uint64{"GPU-0": 40960 * mib, "GPU-1": 40960 * mib, "GPU-2": 40960 * mib, "GPU-3": 40960 * mib}
	// On a node that oversubscribes GPU memory 1.5×: a slice of 20000 MiB
	// of the advertised 61440 is not the whole GPU.
	over := &Container{ID: "o", Namespace: "ns", Pod: "o", Name: "main", Slices: map[string]Share{"GPU-1": {MemoryBytes: 20000 * mib}}}
	owners := map[int]*Container{10: a, 11: a, 12: a, 13: a, 20: b, 30: whole, 40: over}
	owner := func(pid int) *Container { return owners[pid] }
	margin := uint64(300 * mib)

	cases := []struct {
		name   string
		procs  []Process
		mode   Mode
		kills  []int // victims' PIDs
		unattr []int
	}{
		{name: "within slices", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 900 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 500 * mib}}},
		{name: "inside the margin is not over", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 1300 * mib}}},
		{name: "over: the largest of its processes on that GPU", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 800 * mib}, {GPU: "GPU-0", PID: 11, UsedBytes: 600 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 100 * mib}},
			kills: []int{10}},
		{name: "measured per GPU: under on each, over on none", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 1000 * mib}, {GPU: "GPU-1", PID: 11, UsedBytes: 2000 * mib}}},
		{name: "measured per GPU: over on the second only", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 100 * mib}, {GPU: "GPU-1", PID: 11, UsedBytes: 2400 * mib}, {GPU: "GPU-1", PID: 12, UsedBytes: 100 * mib}},
			kills: []int{11}},
		{name: "a GPU it was not granted has no room", mode: Enforce,
			procs: []Process{{GPU: "GPU-3", PID: 20, UsedBytes: 400 * mib}},
			kills: []int{20}},
		{name: "a GPU the node does not serve is reported", mode: Enforce,
			procs:  []Process{{GPU: "GPU-other", PID: 20, UsedBytes: 400 * mib}},
			unattr: []int{20}},
		{name: "many small processes: as many as it takes", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 600 * mib}, {GPU: "GPU-0", PID: 11, UsedBytes: 600 * mib}, {GPU: "GPU-0", PID: 12, UsedBytes: 600 * mib}, {GPU: "GPU-0", PID: 13, UsedBytes: 600 * mib}},
			kills: []int{13, 12}},
		{name: "a whole GPU is never over", mode: Enforce,
			procs: []Process{{GPU: "GPU-2", PID: 30, UsedBytes: 80000 * mib}}},
		{name: "oversubscribed slices are measured against their memory too", mode: Enforce,
			procs: []Process{{GPU: "GPU-1", PID: 40, UsedBytes: 30000 * mib}},
			kills: []int{40}},
		{name: "report kills nothing", mode: Report,
			procs: []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 5000 * mib}}},
		{name: "unattributed are reported, never killed", mode: Enforce,
			procs:  []Process{{GPU: "GPU-0", PID: 99, UsedBytes: 50000 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 100 * mib}},
			unattr: []int{99}},
		{name: "of equal processes the newest PID", mode: Enforce,
			procs: []Process{{GPU: "GPU-0", PID: 11, UsedBytes: 700 * mib}, {GPU: "GPU-0", PID: 10, UsedBytes: 700 * mib}},
			kills: []int{11}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(Sample{Processes: tc.procs, MemoryBytes: totals}, owner, Rules{Mode: tc.mode, Margin: margin})
			var kills, unattr []int
			for _, k := range v.Kills {
				kills = append(kills, k.Victim.PID)
				if !k.Use.Over(margin) || k.Use.Container != owners[k.Victim.PID] {
					t.Errorf("kill %+v: not over, or not its container's", k)
				}
			}
			for _, p := range v.Unattributed {
				unattr = append(unattr, p.PID)
			}
			if !equal(kills, tc.kills) || !equal(unattr, tc.unattr) {
				t.Errorf("kills %v unattributed %v; want %v and %v", kills, unattr, tc.kills, tc.unattr)
			}
			var used uint64
			for _, u := range v.Uses {
				used += u.UsedBytes
			}
			for _, p := range v.Unattributed {
				used += p.UsedBytes
			}
			var want uint64
			for _, p := range tc.procs {
				want += p.UsedBytes
			}
			if used != want {
				t.Errorf("uses and unattributed sum to %d bytes; the processes use %d", used, want)
			}
		})
	}
}

func TestDecideSumsSMShares(t *testing.T) {
	c := &Container{ID: "a", Slices: map[string]Share{"GPU-0": {MemoryBytes: mib, Cores: 25}}}
	owner := func(int) *Container { return c }
	gpus := map[string]uint64{"GPU-0": 40960 * mib}
	v := Decide(Sample{Processes: []Process{{GPU: "GPU-0", PID: 1, SMPercent: 30}, {GPU: "GPU-0", PID: 2, SMPercent: -1}, {GPU: "GPU-0", PID: 3, SMPercent: 20}}, MemoryBytes: gpus}, owner, Rules{Mode: Report})
	if len(v.Uses) != 1 || v.Uses[0].SMPercent != 50 || v.Uses[0].Cores != 25 {
		t.Fatalf("uses %+v; want one at 50%% SM against 25 cores", v.Uses)
	}
	v = Decide(Sample{Processes: []Process{{GPU: "GPU-0", PID: 2, SMPercent: -1}}, MemoryBytes: gpus}, owner, Rules{Mode: Report})
	if v.Uses[0].SMPercent != -1 {
		t.Errorf("SM share %d where the driver said none; want -1", v.Uses[0].SMPercent)
	}
}

func TestParseMode(t *testing.T) {
	for i, s := range Modes {
		m, err := ParseMode(s)
		if err != nil || int(m) != i || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("kill"); err == nil {
		t.Error("ParseMode(kill) accepted")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
