package protocol

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A newer vgpud adds fields; this one, running beside it in a rolling
// upgrade, reads what it knows of the value and ignores the rest. The
// newer values are in testdata, written as a newer release would: a
// top-level field and a field in every GPU or container.
func TestDecodeANewerInventory(t *testing.T) {
	raw, err := os.ReadFile("testdata/inventory-newer.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeInventory(string(raw))
	if err != nil {
		t.Fatalf("a newer inventory with fields this build does not know: %v", err)
	}
	want := sampleInventory()
	want.Version = Version
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestDecodeANewerAssignment(t *testing.T) {
	raw, err := os.ReadFile("testdata/assignment-newer.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAssignment(string(raw))
	if err != nil {
		t.Fatalf("a newer assignment with fields this build does not know: %v", err)
	}
	want := sampleAssignment()
	want.Version = Version
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// What a reader cannot honour it refuses, saying what wrote it and what
// to do: a feature it does not understand, or a newer major version.
func TestRefuseWhatCannotBeHonoured(t *testing.T) {
	for name, tc := range map[string]struct {
		decode func(string) error
		in     string
		want   []string
	}{
		"inventory requiring mps": {decodeInv, `{"version":1,"requires":["mps"],"gpus":[],"mps":{}}`,
			[]string{wellknown.AnnotationGPUs, "requires mps, which this vgpud does not understand", "upgrade this replica"}},
		"assignment requiring two": {decodeAsg, `{"version":1,"requires":["mps","numa"],"node":"n","containers":[]}`,
			[]string{wellknown.AnnotationAssignment, "requires mps, numa"}},
		"inventory of version 2": {decodeInv, `{"version":2,"gpus":[]}`,
			[]string{"wire version 2 is newer than this vgpud reads (1)", "upgrade this replica, or roll that one back"}},
		"assignment of version 2": {decodeAsg, `{"version":2,"node":"n","containers":[]}`,
			[]string{"wire version 2 is newer"}},
		"inventory of version 0": {decodeInv, `{"gpus":[]}`, []string{"version 0 is not supported (want 1)"}},
	} {
		err := tc.decode(tc.in)
		if err == nil {
			t.Errorf("%s: decoded without error", name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
	}
}

func decodeInv(s string) error { _, err := DecodeInventory(s); return err }
func decodeAsg(s string) error { _, err := DecodeAssignment(s); return err }

// This build writes no requirement it does not itself understand.
func TestEncodeRefusesAnUnknownRequirement(t *testing.T) {
	inv := sampleInventory()
	inv.Requires = []string{"mps"}
	if _, err := EncodeInventory(inv); err == nil {
		t.Error("encoded an inventory requiring a feature this build does not know")
	}
}

// A slice held alone by the mutex policy makes its assignment require
// the feature, which this build honours and its node role lists; one
// without it requires nothing, so older readers read it as before.
func TestMutexSliceRequiresItsFeature(t *testing.T) {
	alone := Assignment{Node: "n1", Containers: []ContainerAssignment{{Name: "c", GPUs: []GPUSlice{{UUID: "GPU-1", MemoryMiB: 1000, Cores: 30, Exclusive: true}}}}}
	raw, err := EncodeAssignment(alone)
	if err != nil || !strings.Contains(raw, `"requires":["mutex"]`) {
		t.Fatalf("%s, %v", raw, err)
	}
	back, err := DecodeAssignment(raw)
	if err != nil || !back.HoldsAlone() {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	alone.Containers[0].GPUs[0].Exclusive = false
	if raw, _ := EncodeAssignment(alone); strings.Contains(raw, "requires") || strings.Contains(raw, "exclusive") {
		t.Fatalf("a shared slice: %s", raw)
	}
	inv := Inventory{Features: UnderstoodFeatures(), GPUs: []GPU{{UUID: "GPU-1", MemoryMiB: 1, Cores: 100, Split: 1, Healthy: true}}}
	raw, err = EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeInventory(raw); err != nil || !slices.Contains(got.Features, FeatureMutex) {
		t.Fatalf("inventory %s: %+v, %v", raw, got, err)
	}
}
