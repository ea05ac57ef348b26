package gpu

import (
	"os"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvidiaDriverDir lists the PCI devices bound to the NVIDIA driver.
const nvidiaDriverDir = "/sys/bus/pci/drivers/nvidia"

// Present is a fingerprint of the GPUs the machine has now, which the
// node role compares between rescans. NVML lists the GPUs it found when
// it was initialised, and a GPU added later shows only after it is
// initialised again (which invalidates every handle and event set), so on
// a real node the fingerprint is the PCI devices bound to the NVIDIA
// driver in sysfs: cheap, and it sees a GPU come or go without touching
// NVML. Where sysfs does not list them it is constant, and the rescan
// finds nothing. A mock machine answers with its GPUs' UUIDs.
func Present(lib nvml.Interface) string {
	if m, ok := lib.(*Mock); ok {
		return m.fingerprint()
	}
	entries, err := os.ReadDir(nvidiaDriverDir)
	if err != nil {
		return ""
	}
	var ids []string
	for _, e := range entries {
		// PCI addresses (0000:3b:00.0); the rest are driver attributes.
		if name := e.Name(); strings.Count(name, ":") == 2 && strings.Contains(name, ".") {
			ids = append(ids, name)
		}
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}
