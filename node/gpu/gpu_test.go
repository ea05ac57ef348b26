package gpu

import (
	"strings"
	"testing"
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
