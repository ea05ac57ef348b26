package gpu

import (
	"os"
	"os/exec"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestProcessesOnAMock(t *testing.T) {
	lib, err := Open("fake:2xNVIDIA L4:23034", "n1")
	if err != nil {
		t.Fatal(err)
	}
	m := lib.(*Mock)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init: %v", ret)
	}
	procs, since, err := Processes(lib, 0)
	if err != nil || len(procs) != 0 {
		t.Fatalf("an idle machine: %v, %v", procs, err)
	}
	// Live host processes: the mock, like the driver, lists no ended one.
	a, b := os.Getpid(), os.Getppid()
	if err := m.SetProcess("0", a, 1500, 40); err != nil {
		t.Fatal(err)
	}
	if err := m.SetProcess("1", b, 300, -1); err != nil {
		t.Fatal(err)
	}
	procs, since, err = Processes(lib, since)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[0].PID != a || procs[0].UsedBytes != 1500<<20 || procs[0].SMPercent != 40 ||
		procs[1].PID != b || procs[1].UsedBytes != 300<<20 || procs[1].SMPercent != -1 || procs[0].GPU == procs[1].GPU {
		t.Fatalf("processes %+v", procs)
	}
	// The driver's samples are read once: the next read sees only newer ones.
	if _, newer, _ := Processes(lib, since); newer <= since {
		t.Errorf("sample clock did not move: %d after %d", newer, since)
	}
	if err := m.SetProcess("0", a, 0, 0); err != nil {
		t.Fatal(err)
	}
	if procs, _, _ := Processes(lib, 0); len(procs) != 1 || procs[0].PID != b {
		t.Errorf("after taking a off: %+v", procs)
	}
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	if err := m.SetProcess("0", ended.Process.Pid, 100, 0); err != nil {
		t.Fatal(err)
	}
	if procs, _, _ := Processes(lib, 0); len(procs) != 1 {
		t.Errorf("an ended process is listed: %+v", procs)
	}
	for _, bad := range []struct {
		gpu     string
		pid, sm int
	}{{"7", 1, 0}, {"0", 0, 0}, {"0", 1, 101}, {"0", 1, -2}} {
		if err := m.SetProcess(bad.gpu, bad.pid, 10, bad.sm); err == nil {
			t.Errorf("SetProcess(%+v) accepted", bad)
		}
	}
	if err := m.SetFailing(procs0UUID(t, m), true); err != nil {
		t.Fatal(err)
	}
	if procs, _, err := Processes(lib, 0); err == nil || len(procs) != 1 {
		t.Errorf("a lost GPU: %+v, %v; want the other GPU's process and an error naming the lost one", procs, err)
	}
}

func procs0UUID(t *testing.T, m *Mock) string {
	t.Helper()
	uuid, ret := m.Devices[0].GetUUID()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return uuid
}
