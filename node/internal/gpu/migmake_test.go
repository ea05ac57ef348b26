package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/protocol/mig"
)

// Making and destroying instances on the mock, whose geometry is the
// H100 80GB driver's.
func TestMakeAndDestroyMIG(t *testing.T) {
	lib := openFake(t, "1xH100-SXM5-80GB:81920:mig=")
	devs, err := Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	parent := devs[0].UUID
	profiles, err := MIGProfiles(lib, parent)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var three MIGProfile
	for _, p := range profiles {
		names = append(names, p.Name)
		if p.Name == "3g.40gb" {
			three = p
		}
	}
	if want := []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb"}; !slices.Equal(names, want) {
		t.Fatalf("profiles %v, want %v (1g.10gb+me names no resource)", names, want)
	}
	if !slices.Equal(three.Placements, []mig.Span{{Start: 0, Size: 4}, {Start: 4, Size: 4}}) || three.SMs != 60 || three.MemoryMiB != 40448 {
		t.Fatalf("3g.40gb: %+v", three)
	}

	m, err := MakeMIG(lib, parent, three.ID, three.Placements[1])
	if err != nil {
		t.Fatal(err)
	}
	devs, _ = Discover(lib)
	if ins := devs[0].MIG.Instances; len(ins) != 1 || ins[0].UUID != m.UUID || ins[0].Start != 4 || ins[0].Profile != "3g.40gb" {
		t.Fatalf("after the make: %+v, want %s at 4", ins, m.UUID)
	}
	if _, err := MakeMIG(lib, parent, profiles[0].ID, mig.Span{Start: 5, Size: 1}); !errors.Is(err, ErrNoRoom) {
		t.Errorf("1g.10gb inside the 3g.40gb: %v, want ErrNoRoom", err)
	}
	// IDs name the instance only with its UUID: another's is not touched.
	if gone, err := DestroyMIG(lib, parent, three.ID, three.Placements[1], Made{UUID: "MIG-other", GI: m.GI, CI: m.CI}, false); err != nil || !gone {
		t.Errorf("destroy under another UUID: gone %v, %v", gone, err)
	}
	if devs, _ = Discover(lib); len(devs[0].MIG.Instances) != 1 {
		t.Fatal("an instance destroyed under another UUID")
	}
	// A process on it keeps it, as the driver would, and the error says
	// which.
	if err := lib.SetProcess(m.UUID, os.Getpid(), 100, -1); err != nil {
		t.Fatal(err)
	}
	// The driver lists it on the GPU too, where the node's sampling reads.
	if procs, _, _ := Processes(lib, 0); len(procs) != 1 || procs[0].GPU != parent || procs[0].PID != os.Getpid() {
		t.Errorf("processes %+v; want PID %d listed on its GPU %s", procs, os.Getpid(), parent)
	}
	if _, err := DestroyMIG(lib, parent, three.ID, three.Placements[1], m, false); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("destroy with a process on it: %v, want ErrInUse naming PID %d", err, os.Getpid())
	}
	if devs, _ = Discover(lib); len(devs[0].MIG.Instances) != 1 {
		t.Fatal("destroyed with a process on it")
	}
	if err := lib.SetProcess(m.UUID, os.Getpid(), 0, -1); err != nil {
		t.Fatal(err)
	}
	if gone, err := DestroyMIG(lib, parent, three.ID, three.Placements[1], m, false); err != nil || gone {
		t.Fatalf("destroy: gone %v, %v", gone, err)
	}
	if err := lib.SetProcess(m.UUID, os.Getpid(), 100, -1); err == nil {
		t.Error("declared a process on a MIG device destroyed")
	}
	if devs, _ = Discover(lib); len(devs[0].MIG.Instances) != 0 {
		t.Fatalf("still there: %+v", devs[0].MIG.Instances)
	}
	if gone, err := DestroyMIG(lib, parent, three.ID, three.Placements[1], m, false); err != nil || !gone {
		t.Errorf("destroy again: gone %v, %v", gone, err)
	}

	// A destroy cut short after the compute instance leaves the GPU
	// instance: the next one finishes it, by its ID, profile and
	// placement; under another profile's name it is left alone.
	m, err = MakeMIG(lib, parent, three.ID, three.Placements[0])
	if err != nil {
		t.Fatal(err)
	}
	d, _ := lib.DeviceGetHandleByUUID(parent)
	gi, _ := d.GetGpuInstanceById(m.GI)
	ci, _ := gi.GetComputeInstanceById(m.CI)
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	if gone, err := DestroyMIG(lib, parent, profiles[0].ID, three.Placements[0], m, true); err != nil || !gone {
		t.Errorf("the half-destroyed one under another profile: gone %v, %v; want left alone", gone, err)
	}
	// Without the record saying a destroy began, a bare GPU instance
	// there may be an operator's, made since the node's went.
	if gone, err := DestroyMIG(lib, parent, three.ID, three.Placements[0], m, false); err != nil || !gone {
		t.Errorf("a bare one, no destroy begun: gone %v, %v; want left alone", gone, err)
	}
	if gone, err := DestroyMIG(lib, parent, three.ID, three.Placements[0], m, true); err != nil || gone {
		t.Errorf("finish the half-destroyed one: gone %v, %v", gone, err)
	}
	if _, found, _ := FindMIG(lib, parent, three.ID, three.Placements[0]); found {
		t.Error("the half-destroyed GPU instance is still there")
	}
}

// What a make cut short leaves is found by its placement, whole or
// without its compute instance, and the half-made one destroyed.
func TestFindMIG(t *testing.T) {
	lib := openFake(t, "1xH100-SXM5-80GB:81920:mig=")
	devs, _ := Discover(lib)
	parent := devs[0].UUID
	profiles, _ := MIGProfiles(lib, parent)
	one := profiles[0] // 1g.10gb
	m, err := MakeMIG(lib, parent, one.ID, mig.Span{Start: 2, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, found, err := FindMIG(lib, parent, one.ID, mig.Span{Start: 2, Size: 1}); err != nil || !found || got != m {
		t.Errorf("whole: %+v %v %v, want %+v", got, found, err, m)
	}
	if _, found, _ := FindMIG(lib, parent, one.ID, mig.Span{Start: 3, Size: 1}); found {
		t.Error("found at a placement with nothing")
	}
	// Half made: a GPU instance alone.
	d, _ := lib.DeviceGetHandleByUUID(parent)
	p, _ := d.GetGpuInstanceProfileInfo(one.ID)
	if _, ret := d.CreateGpuInstanceWithPlacement(&p, &nvml.GpuInstancePlacement{Start: 5, Size: 1}); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	half, found, err := FindMIG(lib, parent, one.ID, mig.Span{Start: 5, Size: 1})
	if err != nil || !found || half.UUID != "" || half.CI != -1 {
		t.Fatalf("half made: %+v %v %v", half, found, err)
	}
	if err := DestroyHalfMade(lib, parent, m.GI); err == nil {
		t.Error("a whole instance destroyed as half made")
	}
	if err := DestroyHalfMade(lib, parent, half.GI); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := FindMIG(lib, parent, one.ID, mig.Span{Start: 5, Size: 1}); found {
		t.Error("the half-made instance is still there")
	}
}

// The mock keeps the instances made after its start for the next
// process, as a driver does, under the same UUIDs.
func TestKeepMIG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mock-mig.json")
	first := openFake(t, "1xH100-SXM5-80GB:81920:mig=1g.10gb")
	if err := first.KeepMIG(path); err != nil {
		t.Fatal(err)
	}
	devs, _ := Discover(first)
	profiles, _ := MIGProfiles(first, devs[0].UUID)
	made, err := MakeMIG(first, devs[0].UUID, profiles[2].ID, profiles[2].Placements[1]) // 3g.40gb at 4
	if err != nil {
		t.Fatal(err)
	}
	second := openFake(t, "1xH100-SXM5-80GB:81920:mig=1g.10gb")
	if err := second.KeepMIG(path); err != nil {
		t.Fatal(err)
	}
	again, found, err := FindMIG(second, devs[0].UUID, profiles[2].ID, profiles[2].Placements[1])
	if err != nil || !found || again.UUID != made.UUID {
		t.Fatalf("after a restart: %+v %v %v, want %s", again, found, err, made.UUID)
	}
	if devs, _ = Discover(second); len(devs[0].MIG.Instances) != 2 {
		t.Errorf("instances %+v: want the spec's 1g.10gb and the kept 3g.40gb", devs[0].MIG.Instances)
	}
	if _, err := DestroyMIG(second, devs[0].UUID, profiles[2].ID, profiles[2].Placements[1], again, false); err != nil {
		t.Fatal(err)
	}
	third := openFake(t, "1xH100-SXM5-80GB:81920:mig=1g.10gb")
	if err := third.KeepMIG(path); err != nil {
		t.Fatal(err)
	}
	if devs, _ = Discover(third); len(devs[0].MIG.Instances) != 1 {
		t.Errorf("a destroyed instance came back: %+v", devs[0].MIG.Instances)
	}
}
