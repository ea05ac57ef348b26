package gpu

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestMockDGXA100HasStableUUIDs(t *testing.T) {
	discover := func(node string) []Device {
		lib, err := Open("mock:dgxa100", node)
		if err != nil {
			t.Fatal(err)
		}
		devs, err := Discover(lib)
		if err != nil {
			t.Fatal(err)
		}
		return devs
	}
	first, again, other := discover("n1"), discover("n1"), discover("n2")
	if len(first) != 8 {
		t.Fatalf("dgxa100 has %d GPUs, want 8", len(first))
	}
	seen := map[string]bool{}
	for i, d := range first {
		if d.Index != i || !strings.Contains(d.Model, "A100") || d.MemoryMiB != 40960 {
			t.Errorf("GPU %d: %+v", i, d)
		}
		if d.UUID != again[i].UUID {
			t.Errorf("GPU %d: UUID changed across restarts: %s then %s", i, d.UUID, again[i].UUID)
		}
		if d.UUID == other[i].UUID {
			t.Errorf("GPU %d: two nodes share UUID %s", i, d.UUID)
		}
		if seen[d.UUID] || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("GPU %d: UUID %s repeated or malformed", i, d.UUID)
		}
		seen[d.UUID] = true
	}
}

func TestOtherMockMachines(t *testing.T) {
	for machine, model := range map[string]string{"dgxh100": "H100", "dgxh200": "H200", "dgxb200": "B200"} {
		lib, err := Open("mock:"+machine, "n1")
		if err != nil {
			t.Fatal(err)
		}
		devs, err := Discover(lib)
		if err != nil || len(devs) != 8 || !strings.Contains(devs[0].Model, model) {
			t.Errorf("%s: %d GPUs, first %+v, err %v", machine, len(devs), devs, err)
		}
	}
}

func TestOpenRejectsUnknownBackends(t *testing.T) {
	for _, b := range []string{"mock:dgx1", "cuda", ""} {
		if _, err := Open(b, "n1"); err == nil {
			t.Errorf("%q accepted", b)
		}
	}
}

func TestFakeMachine(t *testing.T) {
	lib, err := Open("fake:2xA100-80GB:81920:numa=0,1xT4:15360:numa=1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		model string
		mem   int64
		numa  int
	}{{"A100-80GB", 81920, 0}, {"A100-80GB", 81920, 0}, {"T4", 15360, 1}}
	if len(devs) != len(want) {
		t.Fatalf("got %d GPUs, want %d", len(devs), len(want))
	}
	for i, w := range want {
		d := devs[i]
		if d.Model != w.model || d.MemoryMiB != w.mem || d.NUMA != w.numa || d.Index != i || d.BusID == "" {
			t.Errorf("GPU %d = %+v, want %+v", i, d, w)
		}
	}
}

func TestParseFakeRejects(t *testing.T) {
	for _, spec := range []string{"", "4", "xA100:1", "0xA100:1", "4xA100:0", "4xA100:-1", "4xA100:12:numa=x", "4xA100:12:zone=1", "65xA:1", "40xA:1,40xB:1", "2xA:1:numa=0:extra"} {
		if _, err := ParseFake(spec); err == nil {
			t.Errorf("ParseFake(%q) accepted", spec)
		} else if !strings.Contains(err.Error(), "want") {
			t.Errorf("ParseFake(%q) error does not say what to write: %v", spec, err)
		}
	}
}

func TestMockNUMAAndXIDInjection(t *testing.T) {
	lib, err := Open("mock:dgxa100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].NUMA != 0 || devs[7].NUMA != 1 {
		t.Errorf("NUMA of GPU 0 and 7 = %d, %d; want 0, 1", devs[0].NUMA, devs[7].NUMA)
	}
	m := lib.(*Mock)
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := set.Wait(1); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait with nothing injected = %v, want timeout", ret)
	}
	if err := m.InjectXID(devs[3].UUID, 79); err != nil {
		t.Fatal(err)
	}
	e, ret := set.Wait(1000)
	if ret != nvml.SUCCESS || e.EventData != 79 || e.EventType != nvml.EventTypeXidCriticalError {
		t.Fatalf("Wait = %+v, %v", e, ret)
	}
	if u, _ := e.Device.GetUUID(); u != devs[3].UUID {
		t.Errorf("event names %s, want %s", u, devs[3].UUID)
	}
	if err := m.InjectXID("GPU-nope", 79); err == nil {
		t.Error("InjectXID on an unknown GPU succeeded")
	}
	if err := m.SetFailing(devs[3].UUID, true); err != nil {
		t.Fatal(err)
	}
	if _, ret := e.Device.GetMemoryInfo(); ret == nvml.SUCCESS {
		t.Error("a failing GPU answered its memory query")
	}
}

// Every mock GPU reports its use, idle; a failing one is left out.
func TestSamples(t *testing.T) {
	lib, err := Open("fake:2xNVIDIA L4:23034", "n1")
	if err != nil {
		t.Fatal(err)
	}
	got := Samples(lib)
	if len(got) != 2 || got[0].MemoryTotalMiB != 23034 || got[0].UtilizationPercent != 0 || got[0].UUID == got[1].UUID {
		t.Fatalf("samples %+v", got)
	}
	if err := lib.(*Mock).SetFailing(got[1].UUID, true); err != nil {
		t.Fatal(err)
	}
	if again := Samples(lib); len(again) != 1 || again[0].UUID != got[0].UUID {
		t.Fatalf("with GPU 1 failing: %+v", again)
	}
}

// The mocks answer NVML's topology queries as the machines are built: a
// DGX joins every GPU by NVLink and two to each PCIe switch; a fake joins
// the GPUs its spec numbers alike.
func TestMockTopology(t *testing.T) {
	lib, err := Open("mock:dgxa100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if got := devs[3].NVLink; !slices.Equal(got, []int{0, 1, 2, 4, 5, 6, 7}) {
		t.Errorf("dgxa100 GPU 3 NVLink peers %v", got)
	}
	if got := devs[3].PCIeSwitch; !slices.Equal(got, []int{2}) {
		t.Errorf("dgxa100 GPU 3 PCIe switch peers %v", got)
	}
	lib, err = Open("fake:2xA100:40000:nvlink=0:pcie=0,1xA100:40000:pcie=0,1xL4:23034:numa=1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if devs, err = Discover(lib); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][2][]int{{{1}, {1, 2}}, {{0}, {0, 2}}, {nil, {0, 1}}, {nil, nil}} {
		if !slices.Equal(devs[i].NVLink, want[0]) || !slices.Equal(devs[i].PCIeSwitch, want[1]) {
			t.Errorf("fake GPU %d: NVLink %v, PCIe %v; want %v, %v", i, devs[i].NVLink, devs[i].PCIeSwitch, want[0], want[1])
		}
	}
	for _, spec := range []string{"2xA:1:numa=0:numa=1", "2xA:1:pcie=x", "2xA:1:nvlink=-1", "2xA:1:numa=0:nvlink=0:pcie=0:x=1"} {
		if _, err := ParseFake(spec); err == nil {
			t.Errorf("%q accepted", spec)
		}
	}
}

// Discover gives back the NVML init it took when it fails after it: NVML
// counts inits, and a leftover one would keep a rescan's Shutdown from
// letting NVML list the GPUs afresh.
func TestDiscoverReleasesItsInitOnFailure(t *testing.T) {
	inits := 0
	lib := &mock.Interface{
		InitFunc:           func() nvml.Return { inits++; return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { inits--; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
	}
	if _, err := Discover(lib); err == nil || inits != 0 {
		t.Fatalf("err %v, inits left %d", err, inits)
	}
}
