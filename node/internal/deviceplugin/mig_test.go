package deviceplugin

import "testing"

// A MIG instance is one device, whatever the split, and goes with its
// GPU's health.
func TestVirtualDevicesOfMIGInstances(t *testing.T) {
	gpus := []AdvertisedGPU{{UUID: "GPU-a"}, {UUID: "MIG-1", Parent: "GPU-m"}, {UUID: "MIG-2", Parent: "GPU-m"}}
	if got := len(virtualDevices(gpus, 4, nil)); got != 4+1+1 {
		t.Errorf("%d devices, want 6", got)
	}
	if got := virtualDevices(gpus, 4, map[string]bool{"GPU-m": true}); len(got) != 4 {
		t.Errorf("%d devices with the MIG GPU unhealthy, want its instances gone", len(got))
	}
}
