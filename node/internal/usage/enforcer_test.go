package usage

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

type fakeHost struct {
	ids    map[int]string // pid → container ID
	first  map[int]bool
	killed []int
	start  map[int]uint64 // when each PID's process started; 0 unless set
	dead   map[int]bool   // ended or zombie
	ended  []string       // containers ended whole
	hop    map[string]int // ends of a container that fail, still to come
}

func (h *fakeHost) Start(pid int) (uint64, bool) {
	if h.dead[pid] {
		return 0, false
	}
	return h.start[pid], true
}

func (h *fakeHost) ContainerID(pid int) (string, bool, error) {
	id, ok := h.ids[pid]
	return id, ok, nil
}

func (h *fakeHost) Kill(pid int, id string, start uint64) error {
	if h.ids[pid] != id || h.dead[pid] || h.start[pid] != start {
		return ErrMoved
	}
	h.killed = append(h.killed, pid)
	delete(h.ids, pid)
	return nil
}

func (h *fakeHost) First(pid int) bool { return h.first[pid] }

// EndContainer ends every process of id the host knows, but fails
// while h.hop[id] says a process forks faster than it is stopped.
func (h *fakeHost) EndContainer(id string) (int, error) {
	if h.hop[id] > 0 {
		h.hop[id]--
		h.ended = append(h.ended, id)
		return 1, errors.New("1 process still runs")
	}
	n := 0
	for _, pid := range slices.Sorted(maps.Keys(h.ids)) {
		if h.ids[pid] == id {
			h.killed = append(h.killed, pid)
			delete(h.ids, pid)
			n++
		}
	}
	h.ended = append(h.ended, id)
	return n, nil
}

type fakeRecorder struct {
	samples int
	kills   []Kill
	firsts  []bool
	ends    []End
}

func (r *fakeRecorder) Ended(e End, _ uint64, _ int, _ error) { r.ends = append(r.ends, e) }

func (r *fakeRecorder) Sampled(Outcome, time.Duration) { r.samples++ }
func (r *fakeRecorder) Killed(k Kill, first bool, err error) {
	if err == nil {
		r.kills = append(r.kills, k)
		r.firsts = append(r.firsts, first)
	}
}

func TestEnforcerKillsTheOverContainersLargestProcessOnly(t *testing.T) {
	containers := NewContainers()
	containers.Add(Container{ID: "over", Namespace: "t", Pod: "greedy", PodUID: "u1", Name: "main", Slices: map[string]Share{"GPU-0": {MemoryBytes: 1000 * mib}}})
	containers.Add(Container{ID: "fine", Namespace: "t", Pod: "neighbour", PodUID: "u2", Name: "main", Slices: map[string]Share{"GPU-0": {MemoryBytes: 1000 * mib}}})
	host := &fakeHost{ids: map[int]string{100: "over", 101: "over", 200: "fine", 300: "not-ours"}, first: map[int]bool{100: true}}
	procs := []Process{
		{GPU: "GPU-0", PID: 100, UsedBytes: 1200 * mib},
		{GPU: "GPU-0", PID: 101, UsedBytes: 400 * mib},
		{GPU: "GPU-0", PID: 200, UsedBytes: 900 * mib},
		{GPU: "GPU-0", PID: 300, UsedBytes: 9000 * mib}, // another runtime's, or another node's
		{GPU: "GPU-0", PID: 400, UsedBytes: 9000 * mib}, // the host's
	}
	sample := func() (Sample, error) {
		var live []Process
		for _, p := range procs {
			if _, ok := host.ids[p.PID]; ok || p.PID == 400 {
				live = append(live, p)
			}
		}
		return Sample{Processes: live, MemoryBytes: map[string]uint64{"GPU-0": 40960 * mib}}, nil
	}
	rec := &fakeRecorder{}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	e := NewEnforcer(Options{Rules: Rules{Mode: Enforce, Margin: 200 * mib}, Period: time.Second}, sample, containers, host, nil, remembered(t), rec, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))

	v := e.Step()
	if len(host.killed) != 1 || host.killed[0] != 100 {
		t.Fatalf("killed %v; want [100], the over container's largest process", host.killed)
	}
	if len(rec.kills) != 1 || !rec.firsts[0] || rec.kills[0].Use.Container.Pod != "greedy" || rec.kills[0].Use.UsedBytes != 1600*mib {
		t.Errorf("recorded %+v first=%v", rec.kills, rec.firsts)
	}
	if len(v.Unattributed) != 2 {
		t.Errorf("unattributed %+v; want the other runtime's and the host's", v.Unattributed)
	}
	// Next sample: 101 alone (400 MiB) is within the slice; nobody else dies.
	e.Step()
	if len(host.killed) != 1 {
		t.Errorf("killed %v after the over container fell within its slice", host.killed)
	}
	if last, _ := e.Last(); len(last.Uses) != 2 || rec.samples != 2 {
		t.Errorf("last verdict %+v after %d samples", last.Uses, rec.samples)
	}
}

// The driver lists a GPU client under the PID that opened it while any
// process holds its descriptor. Once that PID has been reused by another
// container's process, the memory is still the first holder's, and the
// new holder is never killed for it; nor is a zombie signalled for ever.
func TestEnforcerChargesTheFirstHolderAndKillsNoReusedPID(t *testing.T) {
	containers := NewContainers()
	containers.Add(Container{ID: "tenant", Slices: map[string]Share{"GPU-0": {MemoryBytes: mib}}})
	containers.Add(Container{ID: "innocent", Slices: map[string]Share{"GPU-1": {MemoryBytes: mib}}})
	host := &fakeHost{ids: map[int]string{7: "tenant", 8: "tenant"}, start: map[int]uint64{7: 100, 8: 100}}
	procs := []Process{{GPU: "GPU-0", PID: 7, UsedBytes: 10 * mib}, {GPU: "GPU-0", PID: 8, UsedBytes: 10 * mib}}
	sample := func() (Sample, error) {
		return Sample{Processes: slices.Clone(procs), MemoryBytes: map[string]uint64{"GPU-0": 40960 * mib, "GPU-1": 40960 * mib}}, nil
	}
	rec := &fakeRecorder{}
	e := NewEnforcer(Options{Rules: Rules{Mode: Report}, Period: time.Second}, sample, containers, host, nil, remembered(t), rec, clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.Step() // first seen: both the tenant's
	// 7 ended (its child holds the descriptor) and an innocent container's
	// new process took the PID; 8 is a zombie.
	host.ids[7], host.start[7] = "innocent", 200
	host.dead = map[int]bool{8: true}
	e.rules.Mode = Enforce
	v := e.Step()
	if len(host.killed) != 0 || len(v.Kills) != 0 {
		t.Errorf("killed %v (decided %+v); the listed PIDs no longer run what held the memory", host.killed, v.Kills)
	}
	if len(v.Uses) != 1 || v.Uses[0].Container.ID != "tenant" || v.Uses[0].UsedBytes != 20*mib || !v.Uses[0].Over(0) {
		t.Errorf("uses %+v; want the 20 MiB charged to the tenant, over its slice", v.Uses)
	}
	for _, p := range v.Uses[0].Processes {
		if !p.Orphaned {
			t.Errorf("process %+v not marked orphaned", p)
		}
	}
}

func TestProcfsStart(t *testing.T) {
	p := Procfs{Root: "/proc"}
	if start, live := p.Start(os.Getpid()); !live || start == 0 {
		t.Errorf("this process: start %d live %v", start, live)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, live := p.Start(cmd.Process.Pid); live {
		t.Error("an ended process is live")
	}
}

func TestEnforcerReportModeKillsNothing(t *testing.T) {
	containers := NewContainers()
	containers.Add(Container{ID: "over", Slices: map[string]Share{"GPU-0": {MemoryBytes: mib}}})
	host := &fakeHost{ids: map[int]string{1: "over"}}
	rec := &fakeRecorder{}
	e := NewEnforcer(Options{Rules: Rules{Mode: Report}, Period: time.Second}, func() (Sample, error) {
		return Sample{Processes: []Process{{GPU: "GPU-0", PID: 1, UsedBytes: 100 * mib}}, MemoryBytes: map[string]uint64{"GPU-0": 40960 * mib}}, nil
	}, containers, host, nil, remembered(t), rec, clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	v := e.Step()
	if len(host.killed) != 0 || len(v.Uses) != 1 || !v.Uses[0].Over(0) {
		t.Errorf("report mode: killed %v, uses %+v", host.killed, v.Uses)
	}
}

func TestEnforcerOffSamplesNothing(t *testing.T) {
	sampled := false
	e := NewEnforcer(Options{Rules: Rules{Mode: Off}, Period: time.Second}, func() (Sample, error) { sampled = true; return Sample{}, nil },
		NewContainers(), &fakeHost{}, nil, remembered(t), &fakeRecorder{}, clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := e.Run(context.Background()); err != nil || sampled {
		t.Errorf("off: Run = %v, sampled %v", err, sampled)
	}
}

// remembered is a memory that has seen this boot before: not quiet.
func remembered(t *testing.T) *Memory {
	t.Helper()
	m, err := LoadMemory("", "boot")
	if err != nil {
		t.Fatal(err)
	}
	m.quiet = false
	return m
}
