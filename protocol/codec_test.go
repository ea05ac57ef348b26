package protocol

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sampleInventory() Inventory {
	return Inventory{GPUs: []GPU{
		{UUID: "GPU-0a", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Cores: 100, Split: 10, NUMA: 0, Healthy: true},
		{UUID: "GPU-1b", Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Cores: 100, Split: 10, NUMA: 1, Healthy: false},
	}}
}

func sampleAssignment() Assignment {
	return Assignment{Node: "gpu-node-1", Containers: []ContainerAssignment{
		{Name: "init", GPUs: []GPUSlice{{UUID: "GPU-0a", MemoryMiB: 1000, Cores: 0}}},
		{Name: "main", GPUs: []GPUSlice{{UUID: "GPU-0a", MemoryMiB: 3000, Cores: 30}, {UUID: "GPU-1b", MemoryMiB: 3000, Cores: 30}}},
	}}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if strings.TrimSpace(string(want)) != got {
		t.Errorf("%s changed:\n got %s\nwant %s", name, got, want)
	}
}

func TestInventoryGolden(t *testing.T) {
	s, err := EncodeInventory(sampleInventory())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "inventory.json", s)
	back, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleInventory()
	want.Version = Version
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip: got %+v want %+v", back, want)
	}
}

func TestAssignmentGolden(t *testing.T) {
	s, err := EncodeAssignment(sampleAssignment())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "assignment.json", s)
	back, err := DecodeAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := back.Container("main"); !ok || len(c.GPUs) != 2 {
		t.Errorf("container main: %+v %v", c, ok)
	}
}

func TestDecodeInventoryRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          ``,
		"not json":       `0,GPU-1,10,40960,100,A100,true:`,
		"wrong version":  `{"version":2,"gpus":[]}`,
		"trailing":       `{"version":1,"gpus":[]} {}`,
		"empty uuid":     `{"version":1,"gpus":[{"uuid":"","index":0,"model":"m","memoryMiB":1,"cores":100,"split":1,"numa":0,"healthy":true}]}`,
		"duplicate uuid": `{"version":1,"gpus":[{"uuid":"a","index":0,"model":"m","memoryMiB":1,"cores":100,"split":1},{"uuid":"a","index":1,"model":"m","memoryMiB":1,"cores":100,"split":1}]}`,
		"zero memory":    `{"version":1,"gpus":[{"uuid":"a","index":0,"model":"m","memoryMiB":0,"cores":100,"split":1}]}`,
		"zero split":     `{"version":1,"gpus":[{"uuid":"a","index":0,"model":"m","memoryMiB":10,"cores":100,"split":0}]}`,
		"huge memory":    `{"version":1,"gpus":[{"uuid":"a","index":0,"model":"m","memoryMiB":4611686018427387904,"cores":100,"split":1}]}`,
		"huge split":     `{"version":1,"gpus":[{"uuid":"a","index":0,"model":"m","memoryMiB":10,"cores":100,"split":100000}]}`,
		"string memory":  `{"version":1,"gpus":[{"uuid":"a","index":0,"model":"m","memoryMiB":"10","cores":100,"split":1}]}`,
	} {
		if _, err := DecodeInventory(in); err == nil {
			t.Errorf("%s: decoded %q without error", name, in)
		} else if !strings.Contains(err.Error(), wellknown.AnnotationGPUs) {
			t.Errorf("%s: error does not name the annotation: %v", name, err)
		}
	}
}

func TestDecodeAssignmentRejects(t *testing.T) {
	for name, in := range map[string]string{
		"no node":        `{"version":1,"node":"","containers":[]}`,
		"dup container":  `{"version":1,"node":"n","containers":[{"name":"a","gpus":[{"uuid":"g","memoryMiB":1,"cores":0}]},{"name":"a","gpus":[{"uuid":"h","memoryMiB":1,"cores":0}]}]}`,
		"no gpus":        `{"version":1,"node":"n","containers":[{"name":"a","gpus":[]}]}`,
		"same gpu twice": `{"version":1,"node":"n","containers":[{"name":"a","gpus":[{"uuid":"g","memoryMiB":1,"cores":0},{"uuid":"g","memoryMiB":1,"cores":0}]}]}`,
		"cores > 100":    `{"version":1,"node":"n","containers":[{"name":"a","gpus":[{"uuid":"g","memoryMiB":1,"cores":101}]}]}`,
		"negative mem":   `{"version":1,"node":"n","containers":[{"name":"a","gpus":[{"uuid":"g","memoryMiB":-5,"cores":1}]}]}`,
		// A forged 2^62 MiB would overflow any sum of slices.
		"huge mem": `{"version":1,"node":"n","containers":[{"name":"a","gpus":[{"uuid":"g","memoryMiB":4611686018427387904,"cores":1}]}]}`,
		"null":     `null`,
	} {
		if _, err := DecodeAssignment(in); err == nil {
			t.Errorf("%s: decoded %q without error", name, in)
		}
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	inv := sampleInventory()
	inv.GPUs[1].UUID = inv.GPUs[0].UUID
	if _, err := EncodeInventory(inv); err == nil {
		t.Error("encoded an inventory with a duplicate uuid")
	}
	a := sampleAssignment()
	a.Node = ""
	if _, err := EncodeAssignment(a); err == nil {
		t.Error("encoded an assignment without a node")
	}
}

func TestPhase(t *testing.T) {
	for _, s := range []string{"", "bound", "allocated", "failed: device count 2 != 1", "failed"} {
		if _, err := ParsePhase(s); err != nil {
			t.Errorf("ParsePhase(%q): %v", s, err)
		}
	}
	for _, s := range []string{"Bound", "done", "failedx"} {
		if _, err := ParsePhase(s); err == nil {
			t.Errorf("ParsePhase(%q) accepted", s)
		}
	}
	if r, ok := Failed("no pod").IsFailed(); !ok || r != "no pod" {
		t.Errorf("Failed round trip: %q %v", r, ok)
	}
}

// FuzzDecode checks that decoding never panics and that whatever decodes
// also encodes and decodes again to the same value.
func FuzzDecode(f *testing.F) {
	inv, _ := EncodeInventory(sampleInventory())
	asg, _ := EncodeAssignment(sampleAssignment())
	for _, s := range []string{inv, asg, "", "{}", "null", `{"version":1}`, `{"version":1,"gpus":null}`, `{"version":1,"requires":[],"gpus":[]}`, `{"version":1,"requires":[],"node":"n","containers":[]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if i, err := DecodeInventory(s); err == nil {
			again, err := EncodeInventory(i)
			if err != nil {
				t.Fatalf("decoded inventory does not re-encode: %v", err)
			}
			if j, err := DecodeInventory(again); err != nil || !reflect.DeepEqual(i, j) {
				t.Fatalf("inventory round trip differs: %v", err)
			}
		}
		if a, err := DecodeAssignment(s); err == nil {
			again, err := EncodeAssignment(a)
			if err != nil {
				t.Fatalf("decoded assignment does not re-encode: %v", err)
			}
			if b, err := DecodeAssignment(again); err != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("assignment round trip differs: %v", err)
			}
		}
		_, _ = ParsePhase(s)
	})
}
