package usage

import (
	"testing"
)

// A full GPU holds everyone to their slice: the margin is room on a GPU
// that has room. Containers above their slice lose processes, largest
// excess first, until the GPU fits; nobody within a slice is touched;
// what vgpud may not end makes the GPU full.
func TestDecideFullGPU(t *testing.T) {
	slice := func(id string, miB uint64) *Container {
		return &Container{ID: id, Namespace: "ns", Pod: id, Name: "main", Slices: map[string]Share{"GPU-0": {MemoryBytes: miB * mib}}}
	}
	a, b, c, d, e := slice("a", 8000), slice("b", 8000), slice("c", 8000), slice("d", 8000), slice("e", 8000)
	owners := map[int]*Container{1: a, 2: b, 3: c, 4: d, 5: e, 6: a}
	owner := func(pid int) *Container { return owners[pid] }
	totals := map[string]uint64{"GPU-0": 40960 * mib}
	rules := Rules{Mode: Enforce, Margin: 1024 * mib}
	pids := func(v Outcome) (kills []int) {
		for _, k := range v.Kills {
			kills = append(kills, k.Victim.PID)
		}
		return kills
	}

	// Five containers, each within its slice plus the margin: 43000 MiB
	// on a 40960 MiB GPU. The largest excess goes first, and only as many
	// as make the GPU fit.
	procs := []Process{
		{GPU: "GPU-0", PID: 1, UsedBytes: 9000 * mib},
		{GPU: "GPU-0", PID: 2, UsedBytes: 8900 * mib},
		{GPU: "GPU-0", PID: 3, UsedBytes: 8600 * mib},
		{GPU: "GPU-0", PID: 4, UsedBytes: 8500 * mib},
		{GPU: "GPU-0", PID: 5, UsedBytes: 8000 * mib},
	}
	v := Decide(Sample{Processes: procs, MemoryBytes: totals}, owner, rules)
	if got := pids(v); !equal(got, []int{1}) || !v.Kills[0].Full {
		t.Errorf("full GPU: killed %v (%+v); want [1], the largest excess (1000 MiB), which makes it fit, for a full GPU", got, v.Kills)
	}
	if v.Held["GPU-0"] != (1000+900+600+500)*mib || v.Full["GPU-0"] {
		t.Errorf("held %d MiB, full %v; want 3000 MiB beyond the slices, not full once 1 is killed", v.Held["GPU-0"]/mib, v.Full["GPU-0"])
	}
	// With a reserve of 14000 MiB (room for 26960): one kill frees the
	// whole process, so the next largest excess goes only while the GPU
	// is still over.
	rules.Reserve = 14000 * mib
	v = Decide(Sample{Processes: procs, MemoryBytes: totals}, owner, rules)
	if got := pids(v); !equal(got, []int{1, 2}) || v.Full["GPU-0"] {
		t.Errorf("reserve 14000: killed %v, full %v; want [1 2], not full", got, v.Full)
	}
	// With a reserve of 35000 MiB (room for 5960): everyone above the
	// slice goes; e, at its slice, is never touched, and the GPU is full.
	rules.Reserve = 35000 * mib
	v = Decide(Sample{Processes: procs, MemoryBytes: totals}, owner, rules)
	if got := pids(v); !equal(got, []int{1, 2, 3, 4}) || !v.Full["GPU-0"] {
		t.Errorf("reserve 35000: killed %v, full %v; want [1 2 3 4], full", got, v.Full)
	}
	rules.Reserve = 0

	// A process within the margin of a container with two: only as much
	// as the GPU needs, from the container's largest process.
	procs = []Process{
		{GPU: "GPU-0", PID: 1, UsedBytes: 4500 * mib},
		{GPU: "GPU-0", PID: 6, UsedBytes: 4400 * mib},
		{GPU: "GPU-0", PID: 99, UsedBytes: 32500 * mib}, // the host's
	}
	v = Decide(Sample{Processes: procs, MemoryBytes: totals}, owner, rules)
	if got := pids(v); !equal(got, []int{1}) {
		t.Errorf("killed %v; want [1]: a is 900 MiB above its slice on a GPU 440 MiB over", got)
	}
	// What vgpud may not end (the host's) fills the GPU: nobody within
	// a slice is ended, and the GPU is full.
	procs = []Process{
		{GPU: "GPU-0", PID: 2, UsedBytes: 7000 * mib},
		{GPU: "GPU-0", PID: 99, UsedBytes: 35000 * mib},
	}
	v = Decide(Sample{Processes: procs, MemoryBytes: totals}, owner, rules)
	if len(v.Kills) != 0 || !v.Full["GPU-0"] || v.Held["GPU-0"] != 35000*mib {
		t.Errorf("kills %v, full %v, held %d MiB; want none, full, 35000 held", pids(v), v.Full, v.Held["GPU-0"]/mib)
	}
	// Report mode decides the same and kills nothing.
	rules.Mode = Report
	v = Decide(Sample{Processes: procs, MemoryBytes: totals}, owner, rules)
	if len(v.Kills) != 0 || !v.Full["GPU-0"] {
		t.Errorf("report: kills %v, full %v", pids(v), v.Full)
	}
}

// Memory over a slice under a PID that ended is Stuck: no process of the
// container is left to kill for it, so the enforcer must end the whole
// container. Memory first seen under a dead PID is nobody's, and held.
func TestDecideStuckAndHeld(t *testing.T) {
	a := &Container{ID: "a", Slices: map[string]Share{"GPU-0": {MemoryBytes: 2000 * mib}}}
	owners := map[int]*Container{1: a, 2: a}
	owner := func(pid int) *Container { return owners[pid] }
	totals := map[string]uint64{"GPU-0": 40960 * mib}
	v := Decide(Sample{Processes: []Process{
		{GPU: "GPU-0", PID: 1, UsedBytes: 30000 * mib, Orphaned: true},
		{GPU: "GPU-0", PID: 2, UsedBytes: 100 * mib},
		{GPU: "GPU-0", PID: 9, UsedBytes: 500 * mib, Orphaned: true, Holder: Holder{PID: 9, Dead: true}},
	}, MemoryBytes: totals}, owner, Rules{Mode: Enforce, Margin: 1024 * mib})
	if len(v.Stuck) != 1 || v.Stuck[0].Container != a {
		t.Errorf("stuck %+v; want a", v.Stuck)
	}
	// 2 is live: it goes, though it frees too little.
	if len(v.Kills) != 1 || v.Kills[0].Victim.PID != 2 {
		t.Errorf("kills %+v; want 2 alone, never the orphan", v.Kills)
	}
	if want := (30100 - 2000 + 500) * mib; v.Held["GPU-0"] != uint64(want) {
		t.Errorf("held %d MiB; want %d", v.Held["GPU-0"]/mib, want/mib)
	}
}

// What is held is charged to the pod that opened it: an orphan to its
// first holder's pod, a container's excess to its own; memory first seen
// under a dead PID, or the host's, to no pod.
func TestDecideHeldByPod(t *testing.T) {
	a := &Container{ID: "a", PodUID: "uid-a", Slices: map[string]Share{"GPU-0": {MemoryBytes: 2000 * mib}}}
	owner := func(pid int) *Container {
		if pid == 1 {
			return a
		}
		return nil
	}
	totals := map[string]uint64{"GPU-0": 40960 * mib}
	v := Decide(Sample{Processes: []Process{
		{GPU: "GPU-0", PID: 1, UsedBytes: 2500 * mib},
		{GPU: "GPU-0", PID: 7, UsedBytes: 3000 * mib, Orphaned: true, Holder: Holder{PID: 7, PodUID: "uid-gone", Namespace: "n"}},
		{GPU: "GPU-0", PID: 8, UsedBytes: 400 * mib},
		{GPU: "GPU-0", PID: 9, UsedBytes: 500 * mib, Orphaned: true, Holder: Holder{PID: 9, PodUID: "uid-x", Dead: true}},
	}, MemoryBytes: totals}, owner, Rules{Mode: Report, Margin: 1024 * mib})
	want := map[string]uint64{"uid-a": 500 * mib, "uid-gone": 3000 * mib}
	if got := v.HeldBy["GPU-0"]; len(got) != len(want) || got["uid-a"] != want["uid-a"] || got["uid-gone"] != want["uid-gone"] {
		t.Errorf("held by %v; want %v", got, want)
	}
	if v.Held["GPU-0"] != (500+3000+400+500)*mib {
		t.Errorf("held %d MiB; want 4400", v.Held["GPU-0"]/mib)
	}
}
