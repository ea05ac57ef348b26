package manifests

import (
	"fmt"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol"
)

// The scheduler sends a pod to vgpud only for a resource in its
// extender's managedResources: every per-profile MIG resource vgpud
// accepts is there, counted by the scheduler (the device plugin
// advertises it), and nothing else is.
func TestSchedulerManagesEveryResourceVgpudServes(t *testing.T) {
	cm := objects(t, install)["ConfigMap/vgpud-scheduler"]
	data, _ := cm["data"].(map[string]any)
	var cfg struct {
		Extenders []struct {
			ManagedResources []struct {
				Name               string `json:"name"`
				IgnoredByScheduler bool   `json:"ignoredByScheduler"`
			} `json:"managedResources"`
		} `json:"extenders"`
	}
	raw, _ := data["config.yaml"].(string)
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil || len(cfg.Extenders) != 1 {
		t.Fatalf("the scheduler's config: %v, %d extenders", err, len(cfg.Extenders))
	}
	names := protocol.DefaultResourceNames()
	want := map[string]bool{names.GPU: false, names.GPUMem: true, names.GPUMemPercentage: true, names.GPUCores: true, names.Priority: true}
	for _, p := range protocol.MIGProfiles() {
		want[names.MIGResource(p)] = false
	}
	got := map[string]bool{}
	for _, m := range cfg.Extenders[0].ManagedResources {
		got[m.Name] = m.IgnoredByScheduler
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("managedResources (name: ignoredByScheduler)\n got %v\nwant %v", got, want)
	}
}
