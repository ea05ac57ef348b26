package gpu

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// links fills in each device's NVLink and PCIe switch peers by asking
// NVML about every pair, once at discovery. A pair NVML cannot answer
// for (an older driver, a GPU that does not support the query) counts
// as not joined: placement then treats them as the node at large does.
func links(devs []Device, handles []nvml.Device) {
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			if st, ret := handles[i].GetP2PStatus(handles[j], nvml.P2P_CAPS_INDEX_NVLINK); ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
				devs[i].NVLink = append(devs[i].NVLink, devs[j].Index)
				devs[j].NVLink = append(devs[j].NVLink, devs[i].Index)
			}
			// INTERNAL (one board) and SINGLE or MULTIPLE (PCIe switches)
			// keep the pair off the host bridge.
			if lvl, ret := handles[i].GetTopologyCommonAncestor(handles[j]); ret == nvml.SUCCESS && lvl <= nvml.TOPOLOGY_MULTIPLE {
				devs[i].PCIeSwitch = append(devs[i].PCIeSwitch, devs[j].Index)
				devs[j].PCIeSwitch = append(devs[j].PCIeSwitch, devs[i].Index)
			}
		}
	}
}
