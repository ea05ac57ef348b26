package usage

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The opener forked a child that keeps the descriptor, and exited: the
// driver lists the memory under the dead opener. Two samples stuck, the
// container is ended whole; still listed two samples after, every
// container of the pod; still listed after that, it is held; once the
// driver frees it, the end is forgotten.
func TestEnforcerEndsWhatHoldsTheMemory(t *testing.T) {
	containers := NewContainers()
	containers.Add(Container{ID: "forker", Namespace: "t", Pod: "p", PodUID: "u", Name: "main", Slices: map[string]Share{"GPU-0": {MemoryBytes: 2000 * mib}}})
	containers.Add(Container{ID: "fine", Namespace: "t", Pod: "q", PodUID: "v", Name: "main", Slices: map[string]Share{"GPU-0": {MemoryBytes: 2000 * mib}}})
	host := &fakeHost{ids: map[int]string{10: "forker", 11: "forker", 20: "fine", 30: "sibling"}, start: map[int]uint64{10: 5, 11: 6, 20: 7, 30: 8}}
	listed := []Process{{GPU: "GPU-0", PID: 10, UsedBytes: 30000 * mib}, {GPU: "GPU-0", PID: 20, UsedBytes: 1500 * mib}}
	sample := func() (Sample, error) {
		return Sample{Processes: slices.Clone(listed), MemoryBytes: map[string]uint64{"GPU-0": 40960 * mib}}, nil
	}
	var asked []string
	pods := func(ns, pod, uid string) []string {
		asked = append(asked, ns+"/"+pod+"/"+uid)
		return []string{"forker", "sibling"}
	}
	rec := &fakeRecorder{}
	e := NewEnforcer(Options{Rules: Rules{Mode: Enforce, Margin: 1024 * mib}, Period: time.Second}, sample, containers, host, pods, remembered(t), rec,
		clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.Step() // 10 alive and over: killed
	if !slices.Equal(host.killed, []int{10}) {
		t.Fatalf("killed %v; want the opener, 10", host.killed)
	}
	host.dead = map[int]bool{10: true} // its child, 11, holds the descriptor
	if v := e.Step(); len(v.Stuck) != 1 || len(host.ended) != 0 {
		t.Fatalf("first stuck sample: stuck %+v, ended %v; want stuck, nothing ended yet", v.Stuck, host.ended)
	}
	e.Step()
	if !slices.Equal(host.ended, []string{"forker"}) || !slices.Contains(host.killed, 11) || len(rec.ends) != 1 || rec.ends[0].Stage != EndedContainer {
		t.Fatalf("second stuck sample: ended %v, killed %v, recorded %+v; want the container ended, 11 with it", host.ended, host.killed, rec.ends)
	}
	// Still listed: a sibling holds it.
	e.Step()
	if len(host.ended) != 1 {
		t.Fatalf("ended %v one sample after; want a period's grace", host.ended)
	}
	e.Step()
	if !slices.Equal(asked, []string{"t/p/u"}) || !slices.Equal(host.ended, []string{"forker", "forker", "sibling"}) || rec.ends[1].Stage != EndedPod {
		t.Fatalf("asked %v, ended %v, recorded %+v; want the pod's containers ended", asked, host.ended, rec.ends)
	}
	e.Step()
	e.Step()
	if len(rec.ends) != 3 || rec.ends[2].Stage != Held || len(host.ended) != 3 {
		t.Fatalf("recorded %+v, ended %v; want held, nothing more ended", rec.ends, host.ended)
	}
	if slices.Contains(host.killed, 20) {
		t.Fatal("the co-tenant was killed")
	}
	e.Step()
	if len(rec.ends) != 3 {
		t.Fatalf("recorded %+v; held is told once", rec.ends)
	}
	// The driver frees it: forgotten.
	listed = listed[1:]
	e.Step()
	if len(e.mem.ends) != 0 {
		t.Fatalf("ends %+v after the memory was freed", e.mem.ends)
	}
}

// Memory first listed under a PID already dead is nobody's: a process
// that later reuses the PID is never blamed or killed for it, and the
// memory counts as held.
func TestEnforcerNeverBlamesALaterHolderOfADeadPID(t *testing.T) {
	containers := NewContainers()
	containers.Add(Container{ID: "innocent", Namespace: "t", Pod: "p", Slices: map[string]Share{"GPU-0": {MemoryBytes: mib}}})
	host := &fakeHost{ids: map[int]string{}, dead: map[int]bool{42: true}}
	sample := func() (Sample, error) {
		return Sample{Processes: []Process{{GPU: "GPU-0", PID: 42, UsedBytes: 5000 * mib}}, MemoryBytes: map[string]uint64{"GPU-0": 40960 * mib}}, nil
	}
	e := NewEnforcer(Options{Rules: Rules{Mode: Enforce}, Period: time.Second}, sample, containers, host, nil, remembered(t), &fakeRecorder{},
		clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.Step()
	host.dead, host.ids[42], host.start = nil, "innocent", map[int]uint64{42: 99} // reused
	for range 3 {
		v := e.Step()
		if len(v.Kills) != 0 || len(v.Uses) != 0 || len(v.Unattributed) != 1 || v.Held["GPU-0"] != 5000*mib {
			t.Fatalf("kills %+v, uses %+v, unattributed %+v, held %d MiB; want the memory nobody's and held", v.Kills, v.Uses, v.Unattributed, v.Held["GPU-0"]/mib)
		}
	}
	if len(host.killed) != 0 || len(host.ended) != 0 {
		t.Fatalf("killed %v, ended %v", host.killed, host.ended)
	}
}

// What the enforcer knows survives a restart of the node role: the
// first holder of a PID reused meanwhile is still charged, and the new
// holder is not killed. An unreadable memory starts fresh and ends
// nothing for one period; one of another boot starts fresh.
func TestMemorySurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.json")
	containers := NewContainers()
	containers.Add(Container{ID: "tenant", Namespace: "t", Pod: "p", Slices: map[string]Share{"GPU-0": {MemoryBytes: mib}}})
	containers.Add(Container{ID: "innocent", Namespace: "t", Pod: "q", Slices: map[string]Share{"GPU-0": {MemoryBytes: mib}}})
	host := &fakeHost{ids: map[int]string{7: "tenant"}, start: map[int]uint64{7: 100}}
	sample := func() (Sample, error) {
		return Sample{Processes: []Process{{GPU: "GPU-0", PID: 7, UsedBytes: 10 * mib}}, MemoryBytes: map[string]uint64{"GPU-0": 40960 * mib}}, nil
	}
	start := func(m *Memory) *Enforcer {
		return NewEnforcer(Options{Rules: Rules{Mode: Enforce}, Period: time.Second}, sample, containers, host, nil, m, &fakeRecorder{},
			clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	m, err := LoadMemory(path, "boot-1")
	if err != nil || !m.quiet {
		t.Fatalf("no file: %v, quiet %v; want fresh and quiet", err, m.quiet)
	}
	if v := start(m).Step(); len(v.Kills) != 0 {
		t.Fatalf("killed %+v in the quiet period", v.Kills)
	}
	// Restarted; meanwhile 7 ended and the innocent container's process
	// took its PID.
	host.ids[7], host.start[7] = "innocent", 200
	m, err = LoadMemory(path, "boot-1")
	if err != nil || m.quiet {
		t.Fatalf("reload: %v, quiet %v", err, m.quiet)
	}
	v := start(m).Step()
	if len(v.Kills) != 0 || len(v.Uses) != 1 || v.Uses[0].Container.ID != "tenant" || !v.Uses[0].Processes[0].Orphaned {
		t.Fatalf("after a restart: kills %+v, uses %+v; want the memory the tenant's, orphaned, nobody killed", v.Kills, v.Uses)
	}
	// Another boot: the PIDs mean nothing.
	if m, err = LoadMemory(path, "boot-2"); err != nil || !m.quiet || len(m.holders) != 0 {
		t.Fatalf("another boot: %v, quiet %v, holders %v", err, m.quiet, m.holders)
	}
	// Unreadable: said, fresh and quiet.
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err = LoadMemory(path, "boot-1"); err == nil || !m.quiet || len(m.holders) != 0 {
		t.Fatalf("unreadable: %v, quiet %v, holders %v", err, m.quiet, m.holders)
	}
	if err := os.WriteFile(path, []byte(`{"version":2,"boot":"boot-1","holders":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = LoadMemory(path, "boot-1"); err == nil {
		t.Fatal("a version 2 file read")
	}
}

// members lists a container's live processes from /proc.
func TestProcfsMembers(t *testing.T) {
	root := t.TempDir()
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	other := "f123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	write := func(pid, cgroup, state string) {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "stat"), []byte(pid+" (a b) "+state+" 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n"), 0o644)
	}
	write("10", "12:memory:/kubepods/besteffort/pod1/"+id+"\n0::/\n", "S")
	write("11", "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-"+id+".scope\n", "R")
	write("12", "0::/kubepods/pod1/"+id+"\n", "Z") // a zombie holds nothing to kill
	write("13", "0::/kubepods/pod1/"+other+"\n", "S")
	write("14", "0::/kubepods/pod1/"+other+"/"+id+"\n", "S") // a sub-cgroup named as it likes
	write("self", "0::/\n", "S")
	pids, err := Procfs{Root: root}.members(id)
	if want := []proc{{10, 12345}, {11, 12345}}; err != nil || !slices.Equal(pids, want) {
		t.Fatalf("members %v, %v; want %v: PIDs 10 and 11, with their start", pids, err, want)
	}
}

// What the review of the first version found, each held here.
func TestEnforcerFaults(t *testing.T) {
	gpus := map[string]uint64{"GPU-0": 40960 * mib, "GPU-1": 40960 * mib}
	newE := func(containers *Containers, host *fakeHost, procs *[]Process, err *error) (*Enforcer, *fakeRecorder) {
		rec := &fakeRecorder{}
		sample := func() (Sample, error) { return Sample{Processes: slices.Clone(*procs), MemoryBytes: gpus}, *err }
		pods := func(_, _, _ string) []string { return []string{"a"} }
		return NewEnforcer(Options{Rules: Rules{Mode: Enforce, Margin: 1024 * mib}, Period: time.Second}, sample, containers, host, pods, remembered(t), rec,
			clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil))), rec
	}
	slice := map[string]Share{"GPU-0": {MemoryBytes: 2000 * mib}, "GPU-1": {MemoryBytes: 2000 * mib}}

	t.Run("a zombie first seen is charged to its container, and ended", func(t *testing.T) {
		containers := NewContainers()
		containers.Add(Container{ID: "a", Namespace: "t", Pod: "p", PodUID: "u", Slices: slice})
		// Reaped by the time it is listed? Its cgroup still names "a".
		host := &fakeHost{ids: map[int]string{5: "a"}, dead: map[int]bool{5: true}}
		procs := []Process{{GPU: "GPU-0", PID: 5, UsedBytes: 30000 * mib}}
		var err error
		e, rec := newE(containers, host, &procs, &err)
		v := e.Step()
		if len(v.Uses) != 1 || v.Uses[0].Container.ID != "a" || len(v.Stuck) != 1 {
			t.Fatalf("uses %+v stuck %+v; want the zombie's memory a's, stuck", v.Uses, v.Stuck)
		}
		e.Step()
		if !slices.Equal(host.ended, []string{"a"}) || len(rec.ends) != 1 {
			t.Fatalf("ended %v; want a", host.ended)
		}
	})

	t.Run("a sample a GPU did not answer forgets no holder", func(t *testing.T) {
		containers := NewContainers()
		containers.Add(Container{ID: "a", Slices: slice})
		containers.Add(Container{ID: "b", Slices: slice})
		host := &fakeHost{ids: map[int]string{7: "a"}, start: map[int]uint64{7: 1}}
		procs := []Process{{GPU: "GPU-0", PID: 7, UsedBytes: 100 * mib}}
		var err error
		e, _ := newE(containers, host, &procs, &err)
		e.Step()
		// GPU-0 does not answer once; meanwhile 7 ended and b's process
		// took the PID.
		saved := procs
		procs, err = nil, errors.New("GPU 0: list processes: unknown error")
		e.Step()
		host.ids[7], host.start[7] = "b", 2
		procs, err = saved, nil
		procs[0].UsedBytes = 9000 * mib
		v := e.Step()
		// Whose it is cannot be told: never b's, and b's process is
		// never killed for it; it counts as held.
		if len(v.Kills) != 0 || len(v.Uses) != 0 || len(v.Unattributed) != 1 || v.Held["GPU-0"] != 9000*mib {
			t.Fatalf("kills %+v, uses %+v, unattributed %+v; want the memory nobody's and held", v.Kills, v.Uses, v.Unattributed)
		}
	})

	t.Run("a holder kept through a partial sample, listed again by its own process, is still its", func(t *testing.T) {
		containers := NewContainers()
		containers.Add(Container{ID: "a", Slices: slice})
		host := &fakeHost{ids: map[int]string{7: "a"}, start: map[int]uint64{7: 1}}
		procs := []Process{{GPU: "GPU-0", PID: 7, UsedBytes: 100 * mib}}
		var err error
		e, _ := newE(containers, host, &procs, &err)
		e.Step()
		saved := procs
		procs, err = nil, errors.New("GPU 0: list processes: unknown error")
		e.Step()
		procs, err = saved, nil
		if v := e.Step(); len(v.Uses) != 1 || v.Uses[0].Container.ID != "a" || v.Uses[0].Processes[0].Orphaned {
			t.Fatalf("uses %+v; want the memory a's, its process live", v.Uses)
		}
	})

	t.Run("a GPU that never answers again keeps holders for a while only", func(t *testing.T) {
		containers := NewContainers()
		host := &fakeHost{ids: map[int]string{7: "a"}, start: map[int]uint64{7: 1}}
		procs := []Process{{GPU: "GPU-0", PID: 7, UsedBytes: 100 * mib}}
		var err error
		e, _ := newE(containers, host, &procs, &err)
		e.Step()
		procs, err = nil, errors.New("GPU 0: lost")
		for range maxCarried + 1 {
			e.Step()
		}
		if len(e.mem.holders) != 0 {
			t.Fatalf("holders %+v after %d partial samples", e.mem.holders, maxCarried+1)
		}
	})

	t.Run("stuck on two GPUs is one sample, and a quiet start counts none", func(t *testing.T) {
		containers := NewContainers()
		containers.Add(Container{ID: "a", Slices: slice})
		host := &fakeHost{ids: map[int]string{}, dead: map[int]bool{}}
		procs := []Process{{GPU: "GPU-0", PID: 8, UsedBytes: 9000 * mib}, {GPU: "GPU-1", PID: 8, UsedBytes: 9000 * mib}}
		var err error
		e, _ := newE(containers, host, &procs, &err)
		e.mem.quiet = true
		host.ids[8] = "a"
		e.Step() // quiet: seen alive, nothing done
		host.dead[8] = true
		e.Step()
		if len(host.ended) != 0 {
			t.Fatalf("ended %v after one stuck sample on two GPUs", host.ended)
		}
		e.Step()
		if !slices.Equal(host.ended, []string{"a"}) {
			t.Fatalf("ended %v after two stuck samples; want a", host.ended)
		}
	})

	t.Run("an end that leaves processes running is tried again", func(t *testing.T) {
		containers := NewContainers()
		containers.Add(Container{ID: "a", Namespace: "t", Pod: "p", PodUID: "u", Slices: slice})
		host := &fakeHost{ids: map[int]string{9: "a", 10: "a"}, start: map[int]uint64{9: 1}, hop: map[string]int{"a": 2}}
		procs := []Process{{GPU: "GPU-0", PID: 9, UsedBytes: 30000 * mib}}
		var err error
		e, rec := newE(containers, host, &procs, &err)
		e.Step()
		host.dead = map[int]bool{9: true}
		for range 8 {
			e.Step()
		}
		// Two failed container ends, then one that worked; the pod's comes
		// only after it.
		if len(host.ended) < 3 || host.ended[0] != "a" || host.ended[1] != "a" || host.ended[2] != "a" {
			t.Fatalf("ended %v; want the container tried until it ended", host.ended)
		}
		for _, end := range rec.ends[:2] {
			if end.Stage != EndedContainer {
				t.Fatalf("recorded %+v; want the container's end told while it failed", rec.ends)
			}
		}
	})

	t.Run("a memory with no boot's name is never trusted", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "usage.json")
		if err := os.WriteFile(path, []byte(`{"version":1,"boot":"","holders":[{"pid":3,"start":5,"container":"a"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := LoadMemory(path, "")
		if err != nil || !m.quiet || len(m.holders) != 0 {
			t.Fatalf("%v, quiet %v, holders %v", err, m.quiet, m.holders)
		}
	})
}
