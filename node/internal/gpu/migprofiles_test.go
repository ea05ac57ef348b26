package gpu

import (
	"maps"
	"slices"
	"strings"
	"testing"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Every whole GPU instance profile the presets' GPUs offer, that can
// name a resource, is one vgpud's scheduler is configured for: a pod
// asking it by its resource reaches the extender.
func TestPresetProfilesAreKnown(t *testing.T) {
	names := nvdev.New(nil)
	for _, model := range slices.Sorted(maps.Keys(migPresets())) {
		c := migPresets()[model]
		for giID, gp := range c.MIGProfiles.GpuInstanceProfiles {
			for ciID := range c.MIGProfiles.ComputeInstanceProfiles[giID] {
				p, err := names.NewMigProfile(giID, ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, uint64(gp.MemorySizeMB), c.MemoryMB*1024*1024)
				if err != nil {
					continue
				}
				s := p.String()
				// "1c.2g.10gb" is part of a GPU instance, which vgpud does
				// not offer; "+me" names no resource.
				if strings.Contains(s, "c.") || !wellknown.ValidMIGProfile(s) {
					continue
				}
				if !wellknown.KnownMIGProfile(s) {
					t.Errorf("%s offers %s, which wellknown.MIGProfiles lacks", model, s)
				}
			}
		}
	}
}
