package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node/internal/gpu"
)

func writeOverrides(t *testing.T, s string) Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Overrides.NodeOverrides = path
	return c
}

// noLabels is a node's labels when the test expects none to be read.
func noLabels(t *testing.T) func() (map[string]string, error) {
	return func() (map[string]string, error) {
		t.Error("labels read, but no entry selects by label")
		return nil, nil
	}
}

func labels(l map[string]string) func() (map[string]string, error) {
	return func() (map[string]string, error) { return l, nil }
}

func TestForNode(t *testing.T) {
	c := writeOverrides(t, "version: v1\nnodes:\n- name: a\n  split: 4\n  memoryScaling: 1.5\n  exclude: [\"0\"]\n- name: b\n  coreScaling: 2\n  backend: \"fake:4xNVIDIA L4:23034\"\n")
	a, err := c.ForNode("a", noLabels(t))
	if err != nil {
		t.Fatal(err)
	}
	if a.Sharing.Split != 4 || a.Sharing.MemoryScaling != 1.5 || a.Sharing.CoreScaling != 1 || len(a.GPUs.ExcludeGPUs) != 1 {
		t.Errorf("node a: %+v", a)
	}
	if a.GPUs.GPUBackend != "nvml" || a.Inspect.InspectSocket != c.Inspect.InspectSocket {
		t.Errorf("node a: backend %q, inspect socket %q: want the flags' values kept", a.GPUs.GPUBackend, a.Inspect.InspectSocket)
	}
	if b, err := c.ForNode("b", noLabels(t)); err != nil || b.GPUs.GPUBackend != "fake:4xNVIDIA L4:23034" {
		t.Errorf("node b: backend %q, %v", b.GPUs.GPUBackend, err)
	}
	other, err := c.ForNode("zzz", noLabels(t))
	if err != nil || other.Sharing.Split != 10 || other.GPUs.ExcludeGPUs != nil {
		t.Errorf("unlisted node: %+v, %v", other, err)
	}
}

// A file written before it had a version reads as v1.
func TestForNodeWithoutVersion(t *testing.T) {
	a, err := writeOverrides(t, "nodes:\n- name: a\n  split: 4\n").ForNode("a", noLabels(t))
	if err != nil || a.Sharing.Split != 4 {
		t.Fatalf("split %d, %v", a.Sharing.Split, err)
	}
}

func TestForNodeByLabel(t *testing.T) {
	c := writeOverrides(t, `version: v1
nodes:
- selector: {matchLabels: {gpu: l4}}
  split: 2
- selector:
    matchExpressions: [{key: gpu, operator: In, values: [a100, h100]}]
  split: 7
- name: special
  split: 3
`)
	for _, tc := range []struct {
		node   string
		labels map[string]string
		split  int
	}{
		{"n1", map[string]string{"gpu": "l4"}, 2},
		{"n2", map[string]string{"gpu": "h100", "zone": "x"}, 7},
		{"n3", map[string]string{"gpu": "t4"}, 10},
		{"n4", nil, 10},
		// A name wins over any selector.
		{"special", map[string]string{"gpu": "l4"}, 3},
	} {
		got, err := c.ForNode(tc.node, labels(tc.labels))
		if err != nil || got.Sharing.Split != tc.split {
			t.Errorf("node %s %v: split %d, %v; want %d", tc.node, tc.labels, got.Sharing.Split, err, tc.split)
		}
	}
	// Two selectors that both match leave the choice to their order: refused.
	both := writeOverrides(t, "nodes:\n- selector: {matchLabels: {gpu: l4}}\n  split: 2\n- selector: {matchLabels: {zone: x}}\n  split: 3\n")
	if _, err := both.ForNode("n1", labels(map[string]string{"gpu": "l4", "zone": "x"})); err == nil || !strings.Contains(err.Error(), "nodes[0] and nodes[1] both select node n1") {
		t.Errorf("two matching selectors: %v", err)
	}
	// Without a way to read labels, the answer says they are needed.
	if _, err := c.ForNode("n1", nil); !errors.Is(err, configapi.ErrNeedsLabels) {
		t.Errorf("no labels func: %v", err)
	}
	if got, err := c.ForNode("special", nil); err != nil || got.Sharing.Split != 3 {
		t.Errorf("a named node needs no labels: split %d, %v", got.Sharing.Split, err)
	}
	broken := writeOverrides(t, "nodes:\n- selector: {matchLabels: {gpu: l4}}\n  split: 2\n")
	if _, err := broken.ForNode("n1", func() (map[string]string, error) { return nil, errors.New("apiserver down") }); err == nil || !strings.Contains(err.Error(), "apiserver down") {
		t.Errorf("labels unreadable: %v", err)
	}
}

func TestForNodeRejects(t *testing.T) {
	for doc, want := range map[string]string{
		"nodes:\n- name: a\n  splitt: 4\n":                            "splitt",
		"nodes:\n- name: a\n  interposerDir: /x\n":                    "interposerDir",
		"nodes:\n- name: a\n- name: a\n":                              "listed twice",
		"nodes:\n- split: 3\n":                                        "neither name nor selector",
		"nodes:\n- name: a\n  selector: {matchLabels: {x: y}}\n":      "both name and selector",
		"nodes:\n- name: a\n  split: 0\n":                             "split: Invalid value: 0: want 1..1000",
		"nodes:\n- name: a\n  memoryScaling: -1":                      "above 0",
		"nodes:\n- name: a\n  exclude: [\"\"]":                        "empty entry",
		"nodes: {}":                                                   "nodes",
		"nodes:\n- name: a\n  backend: mock:nope":                     "mock:dgxa100",
		"version: v2\nnodes:\n- name: a\n":                            `version "v2" is not one this vgpud reads; want v1`,
		"nodes:\n- selector: {matchLabels: {\"a b\": c}}\n  split: 2": "selector",
	} {
		_, err := writeOverrides(t, doc).ForNode("a", labels(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to mention %q", doc, err, want)
		}
	}
}

// Each entry is decoded onto the flags' values; one entry's exclude must
// not change the flags' list for the nodes that other entries or none
// select.
func TestForNodeKeepsTheFlagsExcludeList(t *testing.T) {
	c := writeOverrides(t, "nodes:\n- name: gpu-a\n  exclude: [\"3\"]\n- name: gpu-c\n  split: 2\n")
	c.GPUs.ExcludeGPUs = []string{"0", "1"}
	for node, want := range map[string]string{"gpu-a": "3", "gpu-b": "0,1", "gpu-c": "0,1"} {
		got, err := c.ForNode(node, noLabels(t))
		if err != nil || strings.Join(got.GPUs.ExcludeGPUs, ",") != want {
			t.Errorf("%s: exclude %q, %v; want %s", node, got.GPUs.ExcludeGPUs, err, want)
		}
	}
	if strings.Join(c.GPUs.ExcludeGPUs, ",") != "0,1" {
		t.Errorf("the flags' list became %q", c.GPUs.ExcludeGPUs)
	}
	// An explicit empty list excludes nothing on that node.
	none := writeOverrides(t, "nodes:\n- name: gpu-a\n  exclude: []\n")
	none.GPUs.ExcludeGPUs = []string{"0"}
	if got, err := none.ForNode("gpu-a", noLabels(t)); err != nil || len(got.GPUs.ExcludeGPUs) != 0 {
		t.Errorf("exclude []: %q, %v", got.GPUs.ExcludeGPUs, err)
	}
}

// Every key the file may set overrides a flag of the node role, whose
// findings are then named by the key.
func TestEveryFileKeyOverridesANodeFlag(t *testing.T) {
	c := DefaultConfig()
	flags := map[string]bool{}
	for _, f := range c.Flags() {
		flags[f.Names()[0]] = true
	}
	for _, s := range c.fileSettings() {
		if !flags[s.Flag] {
			t.Errorf("key %s overrides --%s, which the node role has not", s.Key, s.Flag)
		}
	}
}

func TestExcluded(t *testing.T) {
	devs := []gpu.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}}
	c := DefaultConfig()
	c.GPUs.ExcludeGPUs = []string{"0", "GPU-c"}
	got, err := c.GPUs.Excluded(devs)
	if err != nil || len(got) != 1 || got[0].UUID != "GPU-b" {
		t.Fatalf("Excluded = %v, %v", got, err)
	}
	c.GPUs.ExcludeGPUs = []string{"9"}
	if _, err := c.GPUs.Excluded(devs); err == nil || !strings.Contains(err.Error(), "matches no GPU") {
		t.Fatalf("err = %v", err)
	}
}
