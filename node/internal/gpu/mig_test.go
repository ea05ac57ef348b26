package gpu

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/vgpud/vgpud/protocol/mig"
)

func openFake(t *testing.T, spec string) *Mock {
	t.Helper()
	lib, err := Open("fake:"+spec, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return lib.(*Mock)
}

func TestDiscoverStaticMIG(t *testing.T) {
	m := openFake(t, "1xNVIDIA L4:23034,1xA100-SXM4-40GB:40960:mig=3g.20gb+2g.10gb+1g.5gb")
	devs, err := Discover(m)
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].MIG != nil {
		t.Errorf("an L4 has no MIG, got %+v", devs[0].MIG)
	}
	g := devs[1].MIG
	if g == nil || len(g.Instances) != 3 {
		t.Fatalf("GPU 1 MIG = %+v, want 3 instances", g)
	}
	if g.SMs != 98 {
		t.Errorf("SMs %d, want 98 (the 7g profile's)", g.SMs)
	}
	want := []struct {
		profile     string
		mem         int64
		sms         int
		start, size int
	}{{"3g.20gb", 19968, 42, 0, 4}, {"2g.10gb", 9856, 28, 4, 2}, {"1g.5gb", 4864, 14, 6, 1}}
	for i, w := range want {
		in := g.Instances[i]
		if in.Profile != w.profile || in.MemoryMiB != w.mem || in.SMs != w.sms || in.Start != w.start || in.Size != w.size || !strings.HasPrefix(in.UUID, "MIG-") {
			t.Errorf("instance %d = %+v, want %+v", i, in, w)
		}
	}
	// The same spec on the same node names the instances the same: a
	// restarted node role finds what it booked.
	again, err := Discover(openFake(t, "1xNVIDIA L4:23034,1xA100-SXM4-40GB:40960:mig=3g.20gb+2g.10gb+1g.5gb"))
	if err != nil {
		t.Fatal(err)
	}
	if again[1].MIG.Instances[2].UUID != g.Instances[2].UUID {
		t.Error("MIG UUIDs changed across opens")
	}
}

func TestFakeMIGRefusals(t *testing.T) {
	for spec, want := range map[string]string{
		"1xNVIDIA L4:23034:mig=1g.5gb":                             "does not know",
		"1xA100-SXM4-40GB:81920:mig=1g.5gb":                        "that GPU has 40960",
		"1xA100-SXM4-40GB:40960:mig=1g.80gb":                       "is not one of this GPU's",
		"1xA100-SXM4-40GB:40960:mig=1g.5gb++1g.5gb":                "empty profile",
		"1xA100-SXM4-40GB:40960:mig=7g.40gb+1g.5gb":                "INSUFFICIENT_RESOURCES",
		"1xA100-SXM4-40GB:40960:mig=3g.20gb+2g.10gb+1g.5gb+1g.5gb": "INSUFFICIENT_RESOURCES",
	} {
		if _, err := Open("fake:"+spec, "n1"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want it to say %q", spec, err, want)
		}
	}
}

// The geometry the mock enforces, per GPU whose profiles go-nvml carries.
func TestMIGGeometry(t *testing.T) {
	for _, model := range []string{"A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM5-141GB"} {
		t.Run(model, func(t *testing.T) {
			preset := migPresets()[model]
			fresh := func(t *testing.T) *server.Device {
				m := openFake(t, "1x"+model+":"+itoa(preset.MemoryMB)+":mig=")
				return m.Devices[0].(*server.Device)
			}
			one := profile(t, fresh(t), nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			whole := profile(t, fresh(t), nvml.GPU_INSTANCE_PROFILE_7_SLICE)
			three := profile(t, fresh(t), nvml.GPU_INSTANCE_PROFILE_3_SLICE)

			d := fresh(t)
			if n, _ := d.GetGpuInstanceRemainingCapacity(&one); n != int(one.InstanceCount) {
				t.Errorf("empty GPU: room for %d 1-slice instances, want %d", n, one.InstanceCount)
			}
			for i := 0; i < int(one.InstanceCount); i++ {
				if _, ret := d.CreateGpuInstance(&one); ret != nvml.SUCCESS {
					t.Fatalf("1-slice instance %d: %s", i, nvml.ErrorString(ret))
				}
			}
			if _, ret := d.CreateGpuInstance(&one); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("one 1-slice instance too many: %s, want INSUFFICIENT_RESOURCES", nvml.ErrorString(ret))
			}
			if _, ret := d.CreateGpuInstance(&whole); ret == nvml.SUCCESS {
				t.Error("the whole-GPU instance was made on a full GPU")
			}

			d = fresh(t)
			if _, ret := d.CreateGpuInstance(&whole); ret != nvml.SUCCESS {
				t.Fatalf("whole-GPU instance: %s", nvml.ErrorString(ret))
			}
			if n, _ := d.GetGpuInstanceRemainingCapacity(&one); n != 0 {
				t.Errorf("beside the whole-GPU instance, room for %d more", n)
			}

			// Two 3-slice instances at their two placements; a third,
			// and any placement NVML does not list, refused.
			d = fresh(t)
			possible, _ := d.GetGpuInstancePossiblePlacements(&three)
			if len(possible) != 2 {
				t.Fatalf("3-slice placements %v, want 2", possible)
			}
			gi, ret := d.CreateGpuInstanceWithPlacement(&three, &possible[1])
			if ret != nvml.SUCCESS {
				t.Fatalf("3-slice at %v: %s", possible[1], nvml.ErrorString(ret))
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&three, &possible[1]); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("a second instance on the same slices: %s", nvml.ErrorString(ret))
			}
			odd := nvml.GpuInstancePlacement{Start: 1, Size: three.SliceCount}
			if _, ret := d.CreateGpuInstanceWithPlacement(&three, &odd); ret != nvml.ERROR_INVALID_ARGUMENT {
				t.Errorf("a placement NVML does not list: %s", nvml.ErrorString(ret))
			}
			if _, ret := d.CreateGpuInstanceWithPlacement(&three, &possible[0]); ret != nvml.SUCCESS {
				t.Errorf("3-slice at %v beside the other: %s", possible[0], nvml.ErrorString(ret))
			}

			// An instance with a compute instance is in use: it is not
			// destroyed until the compute instance is.
			ci, ret := gi.CreateComputeInstance(ptr(computeProfile(t, gi, three.SliceCount)))
			if ret != nvml.SUCCESS {
				t.Fatalf("compute instance: %s", nvml.ErrorString(ret))
			}
			if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
				t.Errorf("destroy with a compute instance: %s, want IN_USE", nvml.ErrorString(ret))
			}
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				t.Fatal(nvml.ErrorString(ret))
			}
			if ret := gi.Destroy(); ret != nvml.SUCCESS {
				t.Errorf("destroy: %s", nvml.ErrorString(ret))
			}
			if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret == nvml.SUCCESS {
				t.Error("the mock let MIG mode change")
			}
		})
	}
}

func TestMIGNeedsMIGMode(t *testing.T) {
	lib, err := Open("mock:dgxa100", "n1") // profiles known, MIG mode off
	if err != nil {
		t.Fatal(err)
	}
	m := lib.(*Mock)
	d := m.Devices[0].(*server.Device)
	p := profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstance(&p); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("instance with MIG mode off: %s, want NOT_SUPPORTED", nvml.ErrorString(ret))
	}
	if devs, err := Discover(m); err != nil || devs[0].MIG != nil {
		t.Errorf("MIG mode off read as %+v, %v", devs[0].MIG, err)
	}
}

func profile(t *testing.T, d *server.Device, id int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	p, ret := d.GetGpuInstanceProfileInfo(id)
	if ret != nvml.SUCCESS {
		t.Fatalf("profile %d: %s", id, nvml.ErrorString(ret))
	}
	return p
}

// computeProfile is gi's compute profile of the given slices.
func computeProfile(t *testing.T, gi nvml.GpuInstance, slices uint32) nvml.ComputeInstanceProfileInfo {
	t.Helper()
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		p, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && p.SliceCount == slices {
			return p
		}
	}
	t.Fatal("no compute profile")
	return nvml.ComputeInstanceProfileInfo{}
}

func ptr[T any](v T) *T { return &v }

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// A compute instance of part of a GPU instance would share its memory
// with any other there: vgpud offers whole GPU instances only, and says
// which it skipped.
func TestPartialComputeInstancesAreSkipped(t *testing.T) {
	devs, err := Discover(openFake(t, "1xA100-SXM4-40GB:40960:mig=1c.3g.20gb+1g.5gb"))
	if err != nil {
		t.Fatal(err)
	}
	g := devs[0].MIG
	if len(g.Instances) != 1 || g.Instances[0].Profile != "1g.5gb" || len(g.Skipped) != 1 || !strings.Contains(g.Skipped[0], "1c.3g.20gb") {
		t.Errorf("instances %+v, skipped %q; want the 1g.5gb alone, the 1c.3g.20gb skipped", g.Instances, g.Skipped)
	}
}

// The rescan's MIG layout: as discovered, equal to NVML's now, and
// different once an instance is made.
func TestMIGLayoutSeesAnInstanceMade(t *testing.T) {
	m := openFake(t, "1xNVIDIA L4:23034,1xA100-SXM4-40GB:40960:mig=3g.20gb")
	devs, err := Discover(m)
	if err != nil {
		t.Fatal(err)
	}
	none := ownNone{}
	now, ok := Layout(m, devs, none)
	if !ok || now != LayoutOf(devs, none) || !strings.Contains(now, devs[1].MIG.Instances[0].UUID) {
		t.Fatalf("layout %q (%v), discovered %q", now, ok, LayoutOf(devs, none))
	}
	d := m.Devices[1].(*server.Device)
	p := profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	gi, ret := d.CreateGpuInstance(&p)
	if ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	// A GPU instance alone has no MIG device, but takes room: a change.
	alone, _ := Layout(m, devs, none)
	if alone == now {
		t.Errorf("layout %q unchanged after a GPU instance was made", alone)
	}
	info, _ := gi.GetInfo()
	at := mig.Span{Start: int(info.Placement.Start), Size: int(info.Placement.Size)}
	if mine, _ := Layout(m, devs, ownAt{at}); mine != now {
		t.Errorf("layout %q, want %q: the GPU instance is the node's own", mine, now)
	}
	if _, ret := gi.CreateComputeInstance(ptr(computeProfile(t, gi, 1))); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	if after, _ := Layout(m, devs, none); after == now || after == alone {
		t.Errorf("layout %q unchanged after an instance was made", after)
	}
	// A GPU not served (excluded) is not compared: its instances may
	// change without a rescan, and its layout never differs from none.
	if without, ok := Layout(m, devs[:1], none); !ok || without != LayoutOf(devs[:1], none) {
		t.Errorf("layout of the served L4 alone: %q, want %q", without, LayoutOf(devs[:1], none))
	}
}

// The H100 80GB's geometry as its driver reports it (h100Driver), where
// it differs from go-nvml's simplified preset: 3g.40gb takes 4 of 8
// memory slots, so two leave no room for a 1g.10gb, and each instance
// has the driver's memory and SMs.
func TestH100GeometryAsTheDriverReports(t *testing.T) {
	twoHalves(t, "1xH100-SXM5-80GB:81920", "3g.40gb", 40448)
	for spec, want := range map[string]string{
		"1xH100-SXM5-80GB:81920:mig=3g.40gb+3g.40gb+1g.10gb":                 "INSUFFICIENT_RESOURCES",
		"1xH100-SXM5-80GB:81920:mig=7g.80gb+1g.10gb":                         "INSUFFICIENT_RESOURCES",
		"1xH100-SXM5-80GB:81920:mig=1g.20gb+1g.20gb+1g.20gb+1g.20gb+1g.10gb": "INSUFFICIENT_RESOURCES",
	} {
		if _, err := Open("fake:"+spec, "n1"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", spec, err, want)
		}
	}
	for _, spec := range []string{
		"1xH100-SXM5-80GB:81920:mig=4g.40gb+3g.40gb",
		"1xH100-SXM5-80GB:81920:mig=2g.20gb+1g.10gb+1g.10gb+3g.40gb", // 3g.40gb at 4+4
		"1xH100-SXM5-80GB:81920:mig=1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb",
	} {
		if _, err := Open("fake:"+spec, "n1"); err != nil {
			t.Errorf("%s: %v", spec, err)
		}
	}
}

// twoHalves checks the GPU of spec with two instances of its 3-slice
// profile: a 132-SM GPU (the driver's 7g), each instance half its 8
// memory slots with mib MiB and 60 SMs.
func twoHalves(t *testing.T, spec, profile string, mib int64) {
	t.Helper()
	devs, err := Discover(openFake(t, spec+":mig="+profile+"+"+profile))
	if err != nil {
		t.Fatal(err)
	}
	m := devs[0].MIG
	if m == nil || len(m.Instances) != 2 || m.SMs != 132 {
		t.Fatalf("MIG state %+v, want two instances of a 132-SM GPU", m)
	}
	for _, in := range m.Instances {
		if in.Profile != profile || in.MemoryMiB != mib || in.SMs != 60 || in.Size != 4 {
			t.Errorf("instance %+v, want %s with %d MiB, 60 SMs, 4 slots", in, profile, mib)
		}
	}
}

// ownNone made nothing; ownAt made the GPU instances at its placements.
type ownNone struct{}

func (ownNone) IsOurs(string) bool           { return false }
func (ownNone) OwnsAt(string, mig.Span) bool { return false }

type ownAt []mig.Span

func (ownAt) IsOurs(string) bool                  { return false }
func (o ownAt) OwnsAt(_ string, at mig.Span) bool { return slices.Contains(o, at) }

// The H200's geometry as its driver reports it: the H100's 8 slots, with
// more memory per slice.
func TestH200GeometryAsTheDriverReports(t *testing.T) {
	twoHalves(t, "1xH200-SXM5-141GB:144384", "3g.71gb", 71424)
	if _, err := Open("fake:1xH200-SXM5-141GB:144384:mig=3g.71gb+3g.71gb+1g.18gb", "n1"); err == nil || !strings.Contains(err.Error(), "INSUFFICIENT_RESOURCES") {
		t.Errorf("a 1g.18gb beside two 3g.71gb: %v", err)
	}
	if _, err := Open("fake:1xH200-SXM5-141GB:144384:mig=2g.35gb+1g.18gb+1g.18gb+3g.71gb+1g.35gb", "n1"); err == nil {
		t.Error("9 slots taken on an 8-slot GPU")
	}
	if _, err := Open("fake:1xH200-SXM5-141GB:144384:mig=2g.35gb+1g.18gb+1g.18gb+3g.71gb", "n1"); err != nil {
		t.Error(err)
	}
}
