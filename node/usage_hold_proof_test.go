//vgpud:wallclock real processes fork, pass descriptors and are killed; their memory comes back when the kernel reaps them.

package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/usage"
)

// TestForkAndHoldOnNVML is the GPU proof that a descriptor holder does
// not keep memory past a slice (make nvml): a CUDA process grows past its
// slice after it forked a child that keeps the GPU's descriptors, or
// after it passed them over a unix socket to a process in a second
// cgroup of the same pod. The opener is killed, the driver keeps its
// memory listed, and the node must end the container, then the pod,
// until nvidia-smi shows the memory back, within three periods of the
// kill, with the co-tenant untouched. The enforcer runs with the
// DaemonSet's privileges (asDaemonSet). It prints a table.
func TestForkAndHoldOnNVML(t *testing.T) {
	proveHolds(t, nvml.New(), cudaHolds{cudaHogs{cmd: hogCommand(t)}})
}

// TestForkAndHoldOnMock is its twin on a fake GPU, whose process list
// keeps a declared process's memory while its child lives (the mock's
// descriptor holders): the passed descriptor is a child moved to the
// second cgroup.
func TestForkAndHoldOnMock(t *testing.T) {
	lib, err := gpu.Open("fake:1xNVIDIA H100 80GB HBM3:81559", "holds")
	if err != nil {
		t.Fatal(err)
	}
	proveHolds(t, lib, mockHolds{mockHogs{m: lib.(*gpu.Mock)}})
}

// holdHogs start an opener whose descriptors another process holds.
type holdHogs interface {
	hogs
	// share has opener's descriptors held by another process: a child it
	// forks (socket ""), or the process listening on socket. It returns
	// that process's PID.
	share(t *testing.T, opener *hogProc, socket string) int
	// listen starts a process that takes descriptors sent to socket.
	listen(t *testing.T, socket string) int
}

type mockHolds struct{ mockHogs }

// start's opener is a shell whose child is what holds: started now, so
// that the mock learns it while the opener lives.
func (h mockHolds) share(t *testing.T, opener *hogProc, _ string) int {
	t.Helper()
	if !opener.out.Scan() {
		t.Fatal("the opener printed no child")
	}
	child, err := strconv.Atoi(strings.TrimSpace(opener.out.Text()))
	if err != nil {
		t.Fatalf("child %q: %v", opener.out.Text(), err)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	return child
}

func (h mockHolds) start(t *testing.T, uuid string, mib int, busy bool) *hogProc {
	if busy {
		return h.mockHogs.start(t, uuid, mib, busy)
	}
	p := startProc(t, "sh", "-c", "sleep 600 & echo $!; wait")
	p.uuid, p.total = uuid, mib
	if err := h.m.SetProcess(uuid, p.pid(), uint64(mib), 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// listen has no part on the mock: the held descriptor is the child.
func (mockHolds) listen(*testing.T, string) int { return 0 }

type cudaHolds struct{ cudaHogs }

func (h cudaHolds) share(t *testing.T, opener *hogProc, socket string) int {
	t.Helper()
	if socket == "" {
		fmt.Fprintln(opener.in, "fork")
		if !opener.out.Scan() || !strings.HasPrefix(opener.out.Text(), "forked ") {
			t.Fatalf("fork: %q", opener.out.Text())
		}
		child, _ := strconv.Atoi(strings.TrimPrefix(opener.out.Text(), "forked "))
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		return child
	}
	fmt.Fprintln(opener.in, "pass", socket)
	if !opener.out.Scan() || !strings.HasPrefix(opener.out.Text(), "passed ") {
		t.Fatalf("pass: %q", opener.out.Text())
	}
	return 0
}

func (h cudaHolds) listen(t *testing.T, socket string) int {
	t.Helper()
	p := startProc(t, h.cmd[0], append(h.cmd[1:], "hold", socket)...)
	if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "listening") {
		t.Fatalf("hold: %q", p.out.Text())
	}
	go func() {
		for p.out.Scan() { // "holding n", once the descriptors came
		}
	}()
	return p.pid()
}

func proveHolds(t *testing.T, lib nvml.Interface, h holdHogs) {
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	uuid := devs[0].UUID
	const period = 500 * time.Millisecond
	const marginMiB = 512
	cg := newProofCgroups(t)
	containers := usage.NewContainers()
	slice := map[string]usage.Share{uuid: {MemoryBytes: 1000 << 20, Cores: 20}}
	ids := map[string]string{}
	for _, name := range []string{"neighbour", "forker", "passer", "receiver"} {
		ids[name] = containerID()
		pod := name
		if name == "receiver" {
			pod = "passer" // a second container of the passer's pod
		}
		containers.Add(usage.Container{ID: ids[name], Namespace: "proof", Pod: pod, PodUID: "uid-" + pod, Name: name, Slices: slice})
	}
	// A holder's opener is killed first: the holder is then this
	// process's to reap (a zombie still holds, on the mock), as a
	// container's init reaps its orphans.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	neighbour := h.start(t, uuid, 800, true)
	cg.join(t, neighbour.pid(), ids["neighbour"])

	mem, err := usage.LoadMemory(filepath.Join(t.TempDir(), "usage.json"), "proof")
	if err != nil {
		t.Fatal(err)
	}
	pods := func(_, pod, _ string) []string {
		if pod == "passer" {
			return []string{ids["passer"], ids["receiver"]}
		}
		return []string{ids[pod]}
	}
	rec := &holdRecorder{ends: make(chan ended, 8)}
	e := usage.NewEnforcer(usage.Options{Rules: usage.Rules{Mode: usage.Enforce, Margin: marginMiB << 20}, Period: period},
		usage.NVMLSampler(lib, devs, nil), containers, cg.host(), pods, mem, rec, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ran, caps := make(chan struct{}), make(chan error, 1)
	var sets string
	go func() {
		defer close(ran)
		var err error
		sets, err = asDaemonSet()
		if caps <- err; err == nil {
			_ = e.Run(ctx)
		}
	}()
	if err := <-caps; err != nil {
		t.Fatalf("the enforcer's thread with the DaemonSet's privileges: %v", err)
	}

	listed := func(pid int) bool {
		procs, _, _ := gpu.Processes(lib, 0)
		for _, p := range procs {
			if p.PID == pid {
				return true
			}
		}
		if mib, _, ok := h.observed(t, pid); ok && mib > 0 {
			return true
		}
		return false
	}
	type row struct {
		name                 string
		holder               int
		killed, back, stages string
	}
	var rows []row
	for _, sc := range []struct{ name, socket string }{{"forker", ""}, {"passer", filepath.Join(t.TempDir(), "fds.sock")}} {
		receiver := 0
		if sc.socket != "" {
			if receiver = h.listen(t, sc.socket); receiver != 0 {
				cg.join(t, receiver, ids["receiver"])
			}
		}
		opener := h.start(t, uuid, 300, false)
		cg.join(t, opener.pid(), ids[sc.name])
		holder := h.share(t, opener, sc.socket)
		if receiver == 0 {
			go reap(ctx, holder)
		}
		if receiver != 0 {
			holder = receiver
		} else if sc.socket != "" {
			cg.join(t, holder, ids["receiver"]) // the mock's: the child, moved
		} else {
			cg.join(t, holder, ids[sc.name])
		}
		// The enforcer sees the opener alive before it grows.
		time.Sleep(3 * period)
		h.grow(t, opener, 3000)
		grown := time.Now()
		var killed time.Duration
		select {
		case err := <-opener.done:
			killed = time.Since(grown)
			opener.done <- err // for its cleanup
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the opener, grown to %d MiB on a 1000 MiB slice, still runs 10 s later", sc.name, opener.total)
		}
		deadline := time.Now().Add(20 * time.Second)
		for listed(opener.pid()) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		back := time.Since(grown) - killed
		if listed(opener.pid()) {
			t.Fatalf("%s: the opener's memory still listed %v after it was killed; its holder %d alive: %v", sc.name, back, holder, syscall.Kill(holder, 0) == nil)
		}
		want := 3 * period
		if sc.socket != "" {
			want = 6 * period // the container, then the pod
		}
		if back > want+period {
			t.Errorf("%s: memory back %v after the kill; want within %v", sc.name, back, want)
		}
		var stages []string
		for len(rec.ends) > 0 {
			e := <-rec.ends
			stage := fmt.Sprintf("%s (%d)", e.Stage, e.processes)
			if e.err != nil {
				stage += fmt.Sprintf(" [%v]", e.err)
			}
			stages = append(stages, stage)
		}
		rows = append(rows, row{sc.name, holder, killed.Round(time.Millisecond).String(), back.Round(time.Millisecond).String(), strings.Join(stages, ", ")})
	}
	if err := syscall.Kill(neighbour.pid(), 0); err != nil {
		t.Errorf("the co-tenant is gone: %v", err)
	}
	cancel()
	<-ran
	cpu := cpuPerSample(e)

	var b strings.Builder
	fmt.Fprintf(&b, "\nDescriptor holders on %s (%s), attribution: %s, period %v, margin %d MiB\n", devs[0].Model, uuid, cg.why, period, marginMiB)
	fmt.Fprintf(&b, "%-9s %-44s %9s %12s  %s\n", "scenario", "holder", "killed", "memory back", "what the node ended")
	for _, r := range rows {
		how := "a child it forked"
		if r.name == "passer" {
			how = "another cgroup, over a unix socket"
		}
		fmt.Fprintf(&b, "%-9s %-44s %9s %12s  %s\n", r.name, fmt.Sprintf("%d (%s)", r.holder, how), r.killed, r.back, r.stages)
	}
	fmt.Fprintf(&b, "enforcer thread, as the DaemonSet runs it: %s\n", sets)
	fmt.Fprintf(&b, "co-tenant %d: running; one sample costs %v of CPU (%.3f%% of a core at a 1 s period)\n", neighbour.pid(), cpu, float64(cpu)/float64(time.Second)*100)
	t.Log(b.String())
}

// reap waits for pid once it is this process's child (a subreaper's
// orphan), until ctx ends.
func reap(ctx context.Context, pid int) {
	for ctx.Err() == nil {
		if got, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil); got == pid || (err != nil && err != syscall.ECHILD) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type holdRecorder struct{ ends chan ended }

type ended struct {
	usage.End
	processes int
	err       error
}

func (holdRecorder) Sampled(usage.Outcome, time.Duration) {}
func (holdRecorder) Killed(usage.Kill, bool, error)       {}
func (r *holdRecorder) Ended(e usage.End, _ uint64, n int, err error) {
	select {
	case r.ends <- ended{e, n, err}:
	default:
	}
}
