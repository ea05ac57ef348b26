package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/node/gpu"
)

func writeOverrides(t *testing.T, s string) Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.NodeOverrides = path
	return c
}

func TestForNode(t *testing.T) {
	c := writeOverrides(t, "nodes:\n- name: a\n  split: 4\n  memoryScaling: 1.5\n  exclude: [\"0\"]\n- name: b\n  coreScaling: 2\n  backend: \"fake:4xNVIDIA L4:23034\"\n")
	a, err := c.ForNode("a")
	if err != nil {
		t.Fatal(err)
	}
	if a.Split != 4 || a.MemoryScaling != 1.5 || a.CoreScaling != 1 || len(a.ExcludeGPUs) != 1 {
		t.Errorf("node a: %+v", a)
	}
	if a.GPUBackend != "nvml" {
		t.Errorf("node a's backend %q, want the flag's nvml", a.GPUBackend)
	}
	if b, err := c.ForNode("b"); err != nil || b.GPUBackend != "fake:4xNVIDIA L4:23034" {
		t.Errorf("node b: backend %q, %v", b.GPUBackend, err)
	}
	other, err := c.ForNode("zzz")
	if err != nil || other.Split != 10 || other.ExcludeGPUs != nil {
		t.Errorf("unlisted node: %+v, %v", other, err)
	}
}

func TestForNodeRejects(t *testing.T) {
	for doc, want := range map[string]string{
		"nodes:\n- name: a\n  splitt: 4\n":        "splitt",
		"nodes:\n- name: a\n- name: a\n":          "listed twice",
		"nodes:\n- split: 3\n":                    "no name",
		"nodes:\n- name: a\n  split: 0\n":         "want 1..1000",
		"nodes:\n- name: a\n  memoryScaling: -1":  "above 0",
		"nodes: {}":                               "nodes",
		"nodes:\n- name: a\n  backend: mock:nope": "mock:dgxa100",
	} {
		_, err := writeOverrides(t, doc).ForNode("a")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to mention %q", doc, err, want)
		}
	}
}

func TestExcluded(t *testing.T) {
	devs := []gpu.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}}
	c := DefaultConfig()
	c.ExcludeGPUs = []string{"0", "GPU-c"}
	got, err := c.Excluded(devs)
	if err != nil || len(got) != 1 || got[0].UUID != "GPU-b" {
		t.Fatalf("Excluded = %v, %v", got, err)
	}
	c.ExcludeGPUs = []string{"9"}
	if _, err := c.Excluded(devs); err == nil || !strings.Contains(err.Error(), "matches no GPU") {
		t.Fatalf("err = %v", err)
	}
}
