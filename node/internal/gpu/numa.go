package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// numaNode asks NVML for the GPU's NUMA node, then sysfs (older drivers do
// not answer); 0 where neither knows, as on single-socket machines.
func numaNode(d nvml.Device, busID string) int {
	if n, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS && n >= 0 {
		return n
	}
	return SysfsNUMA(busID)
}

// SysfsNUMA is the NUMA node sysfs gives the PCI device at NVML's busID,
// 0 where it gives none.
func SysfsNUMA(busID string) int {
	if len(busID) < 12 {
		return 0
	}
	// NVML writes an 8-digit PCI domain, sysfs a 4-digit one.
	id := strings.ToLower(busID[len(busID)-12:])
	raw, err := os.ReadFile(filepath.Join("/sys/bus/pci/devices", id, "numa_node"))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
