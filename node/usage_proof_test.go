//vgpud:wallclock real processes allocate and are killed by the kernel; the enforcer samples them a period apart.

package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/usage"
)

// TestUsageOnNVML is the GPU proof of enforcement (make nvml): two real
// CUDA processes on GPU 0, each in a cgroup the test makes and registered
// as a container the way the runtime hook registers one; the one that
// grows past its slice must be killed within two sampling periods while
// its co-tenant keeps its memory. It reads each process's memory and SM
// share against nvidia-smi and the CPU one sample costs, and prints a
// table. Needs VGPUD_TEST_NVML=1 and VGPUD_TEST_NVML_HOG (make nvml sets
// it to scripts/nvml/hog.py).
func TestUsageOnNVML(t *testing.T) {
	proveUsage(t, nvml.New(), cudaHogs{cmd: hogCommand(t)})
}

// hogCommand is scripts/nvml/hog.py's command as make nvml gives it; it
// skips the test where no GPU is said to be there.
func hogCommand(t *testing.T) []string {
	t.Helper()
	if os.Getenv("VGPUD_TEST_NVML") != "1" {
		t.Skip("needs an NVIDIA GPU: VGPUD_TEST_NVML=1 (make nvml)")
	}
	hog := os.Getenv("VGPUD_TEST_NVML_HOG")
	if hog == "" {
		t.Fatal("VGPUD_TEST_NVML_HOG: want the command of scripts/nvml/hog.py")
	}
	return strings.Fields(hog)
}

// TestUsageOnMock is the proof's twin on a fake GPU: the processes are
// real (sleep), in real cgroups where the test may make them, and their
// GPU memory is declared on the mock as the driver would report it.
func TestUsageOnMock(t *testing.T) {
	lib, err := gpu.Open("fake:1xNVIDIA H100 80GB HBM3:81559", "proof")
	if err != nil {
		t.Fatal(err)
	}
	proveUsage(t, lib, mockHogs{m: lib.(*gpu.Mock)})
}

// hogs start processes that hold GPU memory, as the proof needs them.
type hogs interface {
	start(t *testing.T, uuid string, mib int, busy bool) *hogProc
	grow(t *testing.T, p *hogProc, mib int)
	// observed is what an outside tool (nvidia-smi) says pid holds, in
	// MiB and SM %; ok false where it has no tool.
	observed(t *testing.T, pid int) (mib, sm int, ok bool)
}

type hogProc struct {
	cmd   *exec.Cmd
	in    io.Writer
	out   *bufio.Scanner
	done  chan error
	uuid  string
	total int
}

func (p *hogProc) pid() int { return p.cmd.Process.Pid }

func startProc(t *testing.T, name string, args ...string) *hogProc {
	t.Helper()
	cmd := exec.Command(name, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &hogProc{cmd: cmd, in: in, out: bufio.NewScanner(out), done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

type mockHogs struct{ m *gpu.Mock }

func (h mockHogs) start(t *testing.T, uuid string, mib int, busy bool) *hogProc {
	p := startProc(t, "sleep", "600")
	p.uuid, p.total = uuid, mib
	sm := 0
	if busy {
		sm = 40
	}
	if err := h.m.SetProcess(uuid, p.pid(), uint64(mib), sm); err != nil {
		t.Fatal(err)
	}
	return p
}

func (h mockHogs) grow(t *testing.T, p *hogProc, mib int) {
	p.total += mib
	if err := h.m.SetProcess(p.uuid, p.pid(), uint64(p.total), 0); err != nil {
		t.Fatal(err)
	}
}

func (mockHogs) observed(*testing.T, int) (int, int, bool) { return 0, 0, false }

type cudaHogs struct{ cmd []string }

func (h cudaHogs) start(t *testing.T, uuid string, mib int, busy bool) *hogProc {
	busyArg := "0"
	if busy {
		busyArg = "1"
	}
	p := startProc(t, h.cmd[0], append(h.cmd[1:], strconv.Itoa(mib), busyArg)...)
	p.uuid, p.total = uuid, mib
	if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "ready") {
		t.Fatalf("%v: no ready line: %q", h.cmd, p.out.Text())
	}
	return p
}

func (cudaHogs) grow(t *testing.T, p *hogProc, mib int) {
	fmt.Fprintf(p.in, "grow %d\n", mib)
	if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "grown") {
		t.Fatalf("grow: %q", p.out.Text())
	}
	p.total += mib
}

func (cudaHogs) observed(t *testing.T, pid int) (int, int, bool) {
	out, err := exec.Command("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Logf("nvidia-smi: %v", err)
		return 0, 0, false
	}
	mib := -1
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, ",")
		if len(f) == 2 && strings.TrimSpace(f[0]) == strconv.Itoa(pid) {
			mib, _ = strconv.Atoi(strings.TrimSpace(f[1]))
		}
	}
	sm := -1
	if out, err := exec.Command("nvidia-smi", "pmon", "-c", "1", "-s", "u").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && f[1] == strconv.Itoa(pid) {
				sm, _ = strconv.Atoi(f[3])
			}
		}
	}
	return mib, sm, mib >= 0
}

// proofCgroups puts processes in cgroups named by container IDs, as the
// runtime does; where the test may not make cgroups, host attributes by
// PID instead and says so.
type proofCgroups struct {
	dir  string // "" when attributing by PID
	why  string
	pids map[int]string
}

func newProofCgroups(t *testing.T) *proofCgroups {
	root := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root = "/sys/fs/cgroup/pids" // v1: any hierarchy names the container
	}
	dir := filepath.Join(root, fmt.Sprintf("vgpud-proof-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return &proofCgroups{why: fmt.Sprintf("attributed by PID: could not make a cgroup (%v)", err), pids: map[int]string{}}
	}
	t.Cleanup(func() {
		subs, _ := os.ReadDir(dir)
		for _, s := range subs {
			if s.IsDir() {
				_ = os.Remove(filepath.Join(dir, s.Name()))
			}
		}
		_ = os.Remove(dir)
	})
	return &proofCgroups{dir: dir, why: "cgroups the test made under " + root, pids: map[int]string{}}
}

func (c *proofCgroups) join(t *testing.T, pid int, id string) {
	t.Helper()
	c.pids[pid] = id
	if c.dir == "" {
		return
	}
	sub := filepath.Join(c.dir, id)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move process %d into %s: %v", pid, sub, err)
	}
	// Inside a container whose own cgroup path names an ID (Docker on
	// cgroup v1), the outermost ID is that container's: attribute by PID.
	if got, ok, _ := (usage.Procfs{Root: "/proc"}).ContainerID(pid); !ok || got != id {
		c.dir, c.why = "", fmt.Sprintf("attributed by PID: in %s the cgroup path names container %q first", sub, got)
	}
}

// host is what the enforcer reads and kills through: /proc where the
// processes are in cgroups, else the PIDs the test registered.
func (c *proofCgroups) host() usage.Host {
	if c.dir != "" {
		return usage.Procfs{Root: "/proc"}
	}
	return pidHost{c.pids, usage.Procfs{Root: "/proc"}}
}

type pidHost struct {
	ids map[int]string
	usage.Procfs
}

func (h pidHost) ContainerID(pid int) (string, bool, error) {
	id, ok := h.ids[pid]
	return id, ok, nil
}

// EndContainer ends the processes the test registered as id's.
func (h pidHost) EndContainer(id string) (int, error) {
	n := 0
	for pid, got := range h.ids {
		if got == id && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n, nil
}

func (h pidHost) Kill(pid int, id string, start uint64) error {
	if got, live := h.Start(pid); h.ids[pid] != id || !live || got != start {
		return usage.ErrMoved
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

type proofRecorder struct{ kills chan usage.Kill }

func (r proofRecorder) Sampled(usage.Outcome, time.Duration) {}
func (r proofRecorder) Ended(usage.End, uint64, int, error)  {}
func (r proofRecorder) Killed(k usage.Kill, _ bool, err error) {
	if err == nil {
		r.kills <- k
	}
}

// cpuPerSample is the CPU one of e's samples costs this process, over 20.
func cpuPerSample(e *usage.Enforcer) time.Duration {
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	const n = 20
	for range n {
		e.Step()
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	return time.Duration(syscall.TimevalToNsec(ru1.Utime)+syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Utime)-syscall.TimevalToNsec(ru0.Stime)) / n
}

func containerID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func proveUsage(t *testing.T, lib nvml.Interface, h hogs) {
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	uuid := devs[0].UUID
	const period = 500 * time.Millisecond
	const marginMiB = 512
	cg := newProofCgroups(t)
	containers := usage.NewContainers()
	greedyID, neighbourID := containerID(), containerID()
	containers.Add(usage.Container{ID: greedyID, Namespace: "proof", Pod: "greedy", Name: "main", Slices: map[string]usage.Share{uuid: {MemoryBytes: 1000 << 20, Cores: 20}}})
	containers.Add(usage.Container{ID: neighbourID, Namespace: "proof", Pod: "neighbour", Name: "main", Slices: map[string]usage.Share{uuid: {MemoryBytes: 2000 << 20, Cores: 50}}})
	neighbour := h.start(t, uuid, 1000, true)
	cg.join(t, neighbour.pid(), neighbourID)
	greedy := h.start(t, uuid, 300, false)
	cg.join(t, greedy.pid(), greedyID)

	sample := usage.NVMLSampler(lib, devs, nil)
	rec := proofRecorder{kills: make(chan usage.Kill, 8)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem, err := usage.LoadMemory("", "proof")
	if err != nil {
		t.Fatal(err)
	}
	e := usage.NewEnforcer(usage.Options{Rules: usage.Rules{Mode: usage.Enforce, Margin: marginMiB << 20}, Period: period}, sample, containers, cg.host(), nil, mem, rec, clock.RealClock{}, log)
	// A fresh memory ends nothing for one period: this is it.
	e.Step()

	// Both show in a sample before either grows.
	var before usage.Outcome
	deadline := time.Now().Add(30 * time.Second)
	for {
		before = e.Step()
		if len(before.Uses) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(period)
	}
	if len(before.Uses) != 2 {
		t.Fatalf("the sample attributed %d of the 2 containers: %+v (unattributed %+v)", len(before.Uses), before.Uses, before.Unattributed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran := make(chan struct{})
	go func() { _ = e.Run(ctx); close(ran) }()

	h.grow(t, greedy, 3000)
	grown := time.Now()
	var killedAfter time.Duration
	select {
	case err := <-greedy.done:
		killedAfter = time.Since(grown)
		greedy.done <- err
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("greedy ended with %v; want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("greedy, grown to %d MiB on a 1000 MiB slice, still runs 10 s later", greedy.total)
	}
	var k usage.Kill
	select {
	case k = <-rec.kills:
	case <-time.After(5 * time.Second):
		t.Fatal("greedy ended, but the enforcer recorded no kill")
	}
	if killedAfter > 2*period {
		t.Errorf("killed %v after growing past its slice; want within two sampling periods (%v)", killedAfter, 2*period)
	}
	time.Sleep(2 * period)
	if err := syscall.Kill(neighbour.pid(), 0); err != nil {
		t.Errorf("the co-tenant is gone: %v", err)
	}
	after, _ := e.Last()
	cancel()
	<-ran

	cpu := cpuPerSample(e)

	var b strings.Builder
	fmt.Fprintf(&b, "\nGPU usage proof on %s (%s), attribution: %s\n", devs[0].Model, uuid, cg.why)
	fmt.Fprintf(&b, "%-10s %6s %10s %10s %12s %8s %12s %10s\n", "container", "pid", "slice MiB", "used MiB", "nvidia-smi", "SM %", "smi SM %", "outcome")
	for _, u := range after.Uses {
		for _, p := range u.Processes {
			smiMiB, smiSM, ok := h.observed(t, p.PID)
			smi, smiSMs := "-", "-"
			if ok {
				smi, smiSMs = strconv.Itoa(smiMiB), strconv.Itoa(smiSM)
				if d := int(p.UsedBytes>>20) - smiMiB; d < -64 || d > 64 {
					t.Errorf("pid %d: vgpud read %d MiB, nvidia-smi %d", p.PID, p.UsedBytes>>20, smiMiB)
				}
			}
			fmt.Fprintf(&b, "%-10s %6d %10d %10d %12s %8d %12s %10s\n", u.Container.Pod, p.PID, u.LimitBytes>>20, p.UsedBytes>>20, smi, p.SMPercent, smiSMs, "running")
		}
	}
	fmt.Fprintf(&b, "%-10s %6d %10d %10d %12s %8s %12s %10s\n", "greedy", k.Victim.PID, k.Use.LimitBytes>>20, k.Use.UsedBytes>>20, "-", "-", "-", "killed")
	fmt.Fprintf(&b, "killed %v after it grew past its slice (period %v, margin %d MiB); one sample costs %v of CPU (%.3f%% of a core at a 1 s period)\n",
		killedAfter.Round(time.Millisecond), period, marginMiB, cpu, float64(cpu)/float64(time.Second)*100)
	t.Log(b.String())
	if !strings.Contains(b.String(), "neighbour") {
		t.Errorf("the co-tenant is not in the last sample: %+v", after.Uses)
	}
}
