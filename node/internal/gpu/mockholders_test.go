//vgpud:wallclock a real child process is reaped by init, in the kernel's time.

package gpu

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The mock keeps a declared process's memory listed while a child that
// may hold its descriptor lives, as the driver does, and frees it once
// the last holder is gone.
func TestMockMemoryOutlivesTheOpenerWhileAChildHolds(t *testing.T) {
	lib, err := Open("fake:1xNVIDIA A100-SXM4-40GB:40960", "holders")
	if err != nil {
		t.Fatal(err)
	}
	m := lib.(*Mock)
	// The opener forks a child that keeps running, then waits.
	opener := exec.Command("sh", "-c", "sleep 600 & echo $!; wait")
	out, err := opener.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := opener.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	child, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("child PID %q: %v", buf[:n], err)
	}
	t.Cleanup(func() { _ = exec.Command("kill", "-9", strconv.Itoa(child)).Run() })
	gpu := "0"
	if err := m.SetProcess(gpu, opener.Process.Pid, 30000, -1); err != nil {
		t.Fatal(err)
	}
	listed := func() []ProcessSample {
		procs, _, err := Processes(lib, 0)
		if err != nil {
			t.Fatal(err)
		}
		return procs
	}
	if got := listed(); len(got) != 1 || got[0].PID != opener.Process.Pid {
		t.Fatalf("listed %+v; want the opener", got)
	}
	_ = opener.Process.Kill()
	_ = opener.Wait()
	if got := listed(); len(got) != 1 || got[0].PID != opener.Process.Pid || got[0].UsedBytes != 30000<<20 {
		t.Fatalf("listed %+v after the opener ended; want its memory still under its PID: child %d holds the descriptor", got, child)
	}
	if err := exec.Command("kill", "-9", strconv.Itoa(child)).Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(listed()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the child is reaped by init
	}
	if got := listed(); len(got) != 0 {
		t.Fatalf("listed %+v once every holder ended", got)
	}
}

// Only a pod container's cgroup makes its processes holders of each
// other's descriptors: a test runner inside a container of its own is
// in none.
func TestContainerInCgroup(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for cg, want := range map[string]string{
		"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-" + id + ".scope\n": id,
		"12:pids:/kubepods/besteffort/pod1/" + id + "\n0::/\n":                                                          id,
		"12:pids:/docker/" + id + "\n0::/\n":                                                                            "",
		"0::/user.slice/session-1.scope\n":                                                                              "",
	} {
		got := ""
		if m := containerInCgroup.FindStringSubmatch(cg); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%q: %q, want %q", cg, got, want)
		}
	}
}

// The mock's declared processes outlive its process, as a driver's
// process list outlives vgpud's: a second mock keeping the same file
// lists them while a holder lives.
func TestMockKeepsProcessesAcrossRestarts(t *testing.T) {
	path := t.TempDir() + "/procs.json"
	open := func() *Mock {
		lib, err := Open("fake:1xNVIDIA A100-SXM4-40GB:40960", "keep")
		if err != nil {
			t.Fatal(err)
		}
		m := lib.(*Mock)
		if err := m.KeepProcesses(path); err != nil {
			t.Fatal(err)
		}
		return m
	}
	holder := exec.Command("sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	first := open()
	if err := first.SetProcess("0", holder.Process.Pid, 700, -1); err != nil {
		t.Fatal(err)
	}
	second := open()
	procs, _, err := Processes(second, 0)
	if err != nil || len(procs) != 1 || procs[0].PID != holder.Process.Pid || procs[0].UsedBytes != 700<<20 {
		t.Fatalf("a restarted mock lists %+v, %v; want the declared process", procs, err)
	}
	_ = holder.Process.Kill()
	_ = holder.Wait()
	if procs, _, _ := Processes(second, 0); len(procs) != 0 {
		t.Fatalf("listed %+v once its holder ended", procs)
	}
	if procs, _, _ := Processes(open(), 0); len(procs) != 0 {
		t.Fatalf("a third mock lists %+v, freed before it started", procs)
	}
}
