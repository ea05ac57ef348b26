package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// shippedFile is the value of key in the documents of path (a manifest or
// a kustomization's patches) that hold it.
func shippedFile(t *testing.T, path, key string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var found string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if s, ok := v[key].(string); ok {
				found = s
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case string:
			if strings.Contains(v, key+": |") {
				var inner any
				if yaml.Unmarshal([]byte(v), &inner) == nil {
					walk(inner)
				}
			}
		}
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var v any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		walk(v)
	}
	if found == "" {
		t.Fatalf("%s holds no %s", path, key)
	}
	return found
}

// docsExample is the first yaml block after heading in a docs page.
func docsExample(t *testing.T, page, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", page, heading)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatalf("%s: no yaml block after %q", page, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// Every node-overrides.yaml vgpud ships or documents reads under the
// current API as it is meant to: the manifest's, the mock overlay's and
// docs/settings.md's example.
func TestShippedOverridesLoad(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		check      map[string]func(Config) bool
	}{
		{"manifest", shippedFile(t, "../manifests/vgpud.yaml", "node-overrides.yaml"), map[string]func(Config) bool{
			"gpu-1": func(c Config) bool { return c.Sharing.Split == 10 && c.GPUs.GPUBackend == "nvml" },
		}},
		{"mock overlay", shippedFile(t, "../manifests/mock/overlay/kustomization.yaml", "node-overrides.yaml"), map[string]func(Config) bool{
			"vgpud-node-3": func(c Config) bool {
				return strings.HasPrefix(c.GPUs.GPUBackend, "fake:1xNVIDIA L4") && c.Usage.GPUUsage == "report"
			},
			"vgpud-node":   func(c Config) bool { return c.Usage.GPUUsage == "auto" },
			"vgpud-node-2": func(c Config) bool { return c.Usage.GPUUsage == "report" },
			"vgpud-node-4": func(c Config) bool { return c.Usage.GPUUsage == "auto" },
		}},
		{"docs", docsExample(t, "../docs/settings.md", "## Per-node overrides"), map[string]func(Config) bool{
			"gpu-node-7": func(c Config) bool {
				return c.Sharing.Split == 4 && c.Sharing.MemoryScaling == 1.5 && len(c.GPUs.ExcludeGPUs) == 2
			},
			"test-node-3": func(c Config) bool { return strings.HasPrefix(c.GPUs.GPUBackend, "fake:") },
		}},
	} {
		path := filepath.Join(t.TempDir(), "node-overrides.yaml")
		if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		c.Overrides.NodeOverrides = path
		for node, ok := range tc.check {
			got, err := c.ForNode(node, labels(map[string]string{}))
			if err != nil || !ok(got) {
				t.Errorf("%s, node %s: %v; split %d, backend %q, gpuUsage %q", tc.name, node, err, got.Sharing.Split, got.GPUs.GPUBackend, got.Usage.GPUUsage)
			}
		}
	}
}
