package usage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	id64    = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	other64 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func TestContainerIDFromCgroup(t *testing.T) {
	cases := []struct {
		file string
		want string
	}{
		{"0::/kubepods/besteffort/pod1234/" + id64 + "\n", id64},
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/cri-containerd-" + id64 + ".scope\n", id64},
		// Hybrid hierarchies: the unified line may name no container.
		{"12:memory:/kubepods/burstable/pod1/" + id64 + "\n11:cpu,cpuacct:/kubepods/burstable/pod1/" + id64 + "\n0::/\n", id64},
		{"13:misc:/\n12:memory:/kubepods/burstable/pod1/" + id64 + "\n", id64},
		// A sub-cgroup the container made below its own, named after
		// another container: still its own.
		{"0::/kubepods/besteffort/pod1/" + id64 + "/" + other64 + "\n", id64},
		{"0::/kubepods/besteffort/pod1/" + id64 + "/sub\n", id64},
		{"12:memory:/kubepods/burstable/pod1/" + id64 + "\n11:cpu,cpuacct:/kubepods/burstable/pod1/" + id64 + "\n", id64},
		{"0::/system.slice/containerd.service\n", ""},
		{"0::/user.slice/user-0.slice/session-1.scope\n", ""},
		{"0::/kubepods/besteffort/pod1234\n", ""},
		{"", ""},
	}
	for _, tc := range cases {
		got, ok := containerIDFromCgroup([]byte(tc.file))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%q: got %q %v; want %q", tc.file, got, ok, tc.want)
		}
	}
}

func TestContainersRegister(t *testing.T) {
	r := NewContainers()
	r.Add(Container{ID: "a", PodUID: "p1"})
	r.Add(Container{ID: "b", PodUID: "p1"})
	r.Add(Container{ID: "c", PodUID: "p2"})
	r.RemovePod("p1")
	if r.Get("a") != nil || r.Get("b") != nil || r.Get("c") == nil || r.Len() != 1 {
		t.Errorf("after removing pod p1: a %v b %v c %v", r.Get("a"), r.Get("b"), r.Get("c"))
	}
}

// fakeProc is a /proc whose <pid>/cgroup says pid runs in container id;
// the pidfd and the signal are the real process's.
func fakeProc(t *testing.T, pid int, id string) Procfs {
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/kubepods/besteffort/podx/"+id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Procfs{Root: root}
}

func sleeper(t *testing.T) (*exec.Cmd, chan error) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd, done
}

func TestKillChecksTheContainerThenSignals(t *testing.T) {
	cmd, done := sleeper(t)
	p := fakeProc(t, cmd.Process.Pid, id64)
	other := strings.Replace(id64, "0", "f", 1)
	if err := p.Kill(cmd.Process.Pid, other, 0); !errors.Is(err, ErrMoved) {
		t.Fatalf("kill as another container's: %v; want ErrMoved", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the process ended (%v) though its cgroup names another container", err)
	default:
	}
	if err := p.Kill(cmd.Process.Pid, id64, 0); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the process ended with %v; want SIGKILL", err)
		}
		done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the process still runs 10 s after the kill")
	}
}

// A process that is not the one that started when first seen (its PID
// reused since) is not signalled.
func TestKillChecksTheStartTime(t *testing.T) {
	cmd, done := sleeper(t)
	p := fakeProc(t, cmd.Process.Pid, id64)
	start, live := Procfs{Root: "/proc"}.Start(cmd.Process.Pid)
	if !live {
		t.Fatal("the sleeper is not live")
	}
	// fakeProc's root holds only the cgroup: read the real stat.
	if err := os.Symlink(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid), filepath.Join(p.Root, strconv.Itoa(cmd.Process.Pid), "stat")); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(cmd.Process.Pid, id64, start+1); !errors.Is(err, ErrMoved) {
		t.Fatalf("kill with another start time: %v; want ErrMoved", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the process ended (%v) though it is not the one first seen", err)
	default:
	}
	if err := p.Kill(cmd.Process.Pid, id64, start); err != nil {
		t.Fatalf("kill with its start time: %v", err)
	}
}

func TestKillOfAnEndedProcessIsMoved(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	p := fakeProc(t, cmd.Process.Pid, id64)
	if err := p.Kill(cmd.Process.Pid, id64, 0); !errors.Is(err, ErrMoved) {
		t.Errorf("kill of an ended process: %v; want ErrMoved", err)
	}
}

func TestFirst(t *testing.T) {
	p := Procfs{Root: "/proc"}
	if p.First(os.Getpid()) {
		t.Errorf("this test process is not the first of its PID namespace")
	}
	root := t.TempDir()
	_ = os.MkdirAll(filepath.Join(root, "7"), 0o755)
	_ = os.WriteFile(filepath.Join(root, "7", "status"), []byte("Name:\tsleep\nNSpid:\t4242\t1\n"), 0o644)
	if !(Procfs{Root: root}).First(7) {
		t.Error("NSpid ending in 1 is a namespace's first process")
	}
}
