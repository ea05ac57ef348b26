package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol/wellknown"
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
	names := wellknown.DefaultResourceNames()
	want := map[string]bool{names.GPU: false, names.GPUMem: true, names.GPUMemPercentage: true, names.GPUCores: true, names.Priority: true}
	for _, p := range wellknown.MIGProfiles() {
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

// The scheduler's pod template carries the hash of its configuration as
// shipped, so that kubectl apply of a release whose configuration changed
// rolls kube-scheduler, which reads it only at start.
func TestSchedulerConfigHash(t *testing.T) {
	all := objects(t, install)
	data, _ := all["ConfigMap/vgpud-scheduler"]["data"].(map[string]any)
	raw, _ := data["config.yaml"].(string)
	sum := sha256.Sum256([]byte(raw))
	want := hex.EncodeToString(sum[:8])
	d := all["Deployment/vgpud-scheduler"]
	spec, _ := d["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	meta, _ := tmpl["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if got := ann["vgpud.io/scheduler-config"]; got != want {
		t.Errorf("vgpud-scheduler's template says vgpud.io/scheduler-config %v; its configuration hashes to %q: write that", got, want)
	}
}
