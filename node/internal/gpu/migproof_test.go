//vgpud:wallclock real processes hold MIG devices on NVML or the mock until the kernel ends them.

package gpu

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/protocol/mig"
)

// holder runs a process on a MIG device: its PID, and what ends it.
type holder func(t *testing.T, uuid string) (pid int, stop func())

// proveMakeMIG is the on-demand path's proof on GPU parent (in MIG
// mode): the smallest whole instance made at a free placement, found by
// it, listed by discovery, kept while a process runs on it, destroyed
// once it has ended; the operator's instances untouched throughout. It
// returns the table's rows.
func proveMakeMIG(t *testing.T, lib nvml.Interface, parent string, hold holder) []string {
	t.Helper()
	d, ret := lib.DeviceGetHandleByUUID(parent)
	if ret != nvml.SUCCESS {
		t.Fatalf("GPU %s: %s", parent, nvml.ErrorString(ret))
	}
	profiles, err := MIGProfiles(lib, parent)
	if err != nil || len(profiles) == 0 {
		t.Fatalf("profiles of %s: %v (%d)", parent, err, len(profiles))
	}
	p := slices.MinFunc(profiles, func(a, b MIGProfile) int { return int(a.MemoryMiB - b.MemoryMiB) })
	before, err := gpuInstances(d)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := mig.FirstFree(p.Placements, before)
	if !ok {
		t.Skipf("no free placement for %s on %s (GPU instances at %v): vgpud leaves the operator's alone", p.Name, parent, before)
	}
	others, _ := Discover(lib)
	var rows []string
	row := func(step string, took time.Duration, result string) {
		rows = append(rows, fmt.Sprintf("%-34s %9s  %s", step, took.Round(10*time.Microsecond), result))
	}

	start := time.Now()
	made, err := MakeMIG(lib, parent, p.ID, at)
	if err != nil {
		t.Fatalf("make %s at %d+%d: %v", p.Name, at.Start, at.Size, err)
	}
	row(fmt.Sprintf("make %s at %d+%d", p.Name, at.Start, at.Size), time.Since(start), fmt.Sprintf("%s (GI %d, CI %d)", made.UUID, made.GI, made.CI))
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			if _, err := DestroyMIG(lib, parent, p.ID, at, made, false); err != nil {
				t.Errorf("clean up %s: %v", made.UUID, err)
			}
		}
	})

	start = time.Now()
	found, ok, err := FindMIG(lib, parent, p.ID, at)
	if err != nil || !ok || found != made {
		t.Fatalf("find at %d+%d: %+v %v %v, want %+v", at.Start, at.Size, found, ok, err, made)
	}
	row("find it by placement", time.Since(start), "the same GI, CI and UUID")

	start = time.Now()
	listed := listedInstance(t, lib, parent, made.UUID)
	if listed.Profile != p.Name || listed.MemoryMiB <= 0 || listed.SMs != p.SMs {
		t.Errorf("discovered %+v; want %s with %d SMs", listed, p.Name, p.SMs)
	}
	row("discovered as a MIG device", time.Since(start), fmt.Sprintf("%s, %d MiB, %d SMs", listed.Profile, listed.MemoryMiB, listed.SMs))

	if hold != nil {
		pid, stop := hold(t, made.UUID)
		start = time.Now()
		waitFor(t, 30*time.Second, fmt.Sprintf("PID %d listed on %s", pid, made.UUID), func() bool { return slices.Contains(runningOn(d, made.UUID), uint32(pid)) })
		row("a process on it, listed", time.Since(start), fmt.Sprintf("PID %d", pid))
		start = time.Now()
		if _, err := DestroyMIG(lib, parent, p.ID, at, made, false); !errors.Is(err, ErrInUse) {
			stop()
			t.Fatalf("destroy with PID %d on it: %v, want ErrInUse", pid, err)
		}
		row("destroy while it runs", time.Since(start), "refused: processes still run on it")
		stop()
		start = time.Now()
		waitFor(t, 30*time.Second, "no process on "+made.UUID, func() bool { return len(runningOn(d, made.UUID)) == 0 })
		row("the process ended, unlisted", time.Since(start), "")
	} else {
		row("a process on it", 0, "not run: no command to hold the GPU (VGPUD_TEST_NVML_HOG)")
	}

	start = time.Now()
	if gone, err := DestroyMIG(lib, parent, p.ID, at, made, false); err != nil || gone {
		t.Fatalf("destroy: gone %v, %v", gone, err)
	}
	destroyed = true
	row("destroy", time.Since(start), "")
	if _, ok, err := FindMIG(lib, parent, p.ID, at); ok || err != nil {
		t.Errorf("still found after the destroy (%v)", err)
	}
	if after, _ := Discover(lib); !sameInstances(others, after) {
		t.Errorf("the operator's instances changed: before %+v, after %+v", others, after)
	}
	row("the operator's instances", 0, "untouched")
	return rows
}

// listedInstance is the MIG instance uuid as discovery lists it.
func listedInstance(t *testing.T, lib nvml.Interface, parent, uuid string) MIGDevice {
	t.Helper()
	devs, err := Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range devs {
		if dev.UUID != parent || dev.MIG == nil {
			continue
		}
		for _, in := range dev.MIG.Instances {
			if in.UUID == uuid {
				return in
			}
		}
	}
	t.Fatalf("discovery does not list %s on %s", uuid, parent)
	return MIGDevice{}
}

// sameInstances says whether a and b list the same MIG devices per GPU.
func sameInstances(a, b []Device) bool {
	key := func(devs []Device) string {
		var s []string
		for _, d := range devs {
			if d.MIG != nil {
				s = append(s, d.UUID+"="+strings.Join(d.MIG.Devices, ","))
			}
		}
		return strings.Join(s, ";")
	}
	return key(a) == key(b)
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// The proof's mock twin: an H100 in MIG mode with an operator's 1g.10gb,
// the process declared on the mock.
func TestMakeMIGProofOnMock(t *testing.T) {
	m := openFake(t, "1xH100-SXM5-80GB:81920:mig=1g.10gb")
	devs, err := Discover(m)
	if err != nil {
		t.Fatal(err)
	}
	rows := proveMakeMIG(t, m, devs[0].UUID, func(t *testing.T, uuid string) (int, func()) {
		if err := m.SetProcess(uuid, os.Getpid(), 256, -1); err != nil {
			t.Fatal(err)
		}
		return os.Getpid(), func() { _ = m.SetProcess(uuid, os.Getpid(), 0, -1) }
	})
	if len(rows) != 8 || !strings.Contains(rows[0], "make 1g.10gb at 1+1") {
		t.Errorf("rows:\n%s", strings.Join(rows, "\n"))
	}
	t.Logf("\nthe mock's H100, made on demand:\n%s", strings.Join(rows, "\n"))
}

// TestMakeMIGOnNVML runs the on-demand proof on the first GPU in MIG
// mode: it makes one instance where nothing is, and destroys it. It never
// changes a GPU's MIG mode; with none in MIG mode it says so and skips.
// VGPUD_TEST_NVML_HOG (scripts/nvml/hog.py) is run on the instance to
// show a process keeps it. Needs VGPUD_TEST_NVML=1 (make nvml).
func TestMakeMIGOnNVML(t *testing.T) {
	if os.Getenv("VGPUD_TEST_NVML") != "1" {
		t.Skip("needs an NVIDIA GPU: VGPUD_TEST_NVML=1 (make nvml)")
	}
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("nvml init: %s", nvml.ErrorString(ret))
	}
	defer lib.Shutdown()
	devs, err := Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(devs, func(d Device) bool { return d.MIG != nil })
	if i < 0 {
		t.Skipf("no GPU of %d in MIG mode: vgpud never turns it on, so making instances stays unproven on this machine", len(devs))
	}
	var hold holder
	if cmd := os.Getenv("VGPUD_TEST_NVML_HOG"); cmd != "" {
		hold = func(t *testing.T, uuid string) (int, func()) { return runHog(t, cmd, uuid) }
	}
	rows := proveMakeMIG(t, lib, devs[i].UUID, hold)
	t.Logf("\nGPU %d %s (%s), made on demand:\n%-34s %9s  %s\n%s", devs[i].Index, devs[i].Model, devs[i].UUID, "step", "took", "result", strings.Join(rows, "\n"))
}

// runHog starts the hog command on the MIG device uuid, holding 256 MiB,
// and waits for it to say it is ready.
func runHog(t *testing.T, command, uuid string) (int, func()) {
	t.Helper()
	f := strings.Fields(command)
	cmd := exec.Command(f[0], append(f[1:], "256")...)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+uuid)
	// hog.py reads stdin for its growth orders and ends at its end: the
	// pipe stays open until stop.
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
	var once sync.Once
	stop := func() {
		once.Do(func() { _ = cmd.Process.Kill(); _ = in.Close(); _ = cmd.Wait() })
	}
	t.Cleanup(stop) // before the instance's own clean-up, which it would block
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	if _, serr := fmt.Sscanf(line, "ready %d", &pid); err != nil || serr != nil {
		stop()
		t.Fatalf("hog on %s: %q (%v)", uuid, line, err)
	}
	return pid, stop
}
