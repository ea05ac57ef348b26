package cluster

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Every cluster-settings.yaml vgpud ships or documents reads under the
// current API as it is meant to: the manifest's (the flags' values) and
// docs/settings-files.md's example.
func TestShippedSettingsLoad(t *testing.T) {
	raw, err := os.ReadFile("../manifests/vgpud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var shipped string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if yaml.Unmarshal([]byte(doc), &cm) == nil && cm.Kind == "ConfigMap" && cm.Data["cluster-settings.yaml"] != "" {
			shipped = cm.Data["cluster-settings.yaml"]
		}
	}
	base := DefaultConfig()
	if got, err := base.withSettings([]byte(shipped)); shipped == "" || err != nil || got != base {
		t.Errorf("the manifest's %q: %+v, %v; want the flags' values", shipped, got, err)
	}
	page, err := os.ReadFile("../docs/settings-files.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(page), "\n## Cluster settings\n")
	_, block, ok := strings.Cut(after, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	got, err := base.withSettings([]byte(block))
	if !ok || err != nil || got.Scheduling.NodePolicy != podmodel.Spread || got.Scheduling.GPUPolicy != podmodel.Binpack || got.Scheduling.DefaultGPUMemPercentage != 50 || got.Scheduling.DefaultGPUCores != 20 {
		t.Errorf("docs' example %q: %+v, %v", block, got, err)
	}
}
