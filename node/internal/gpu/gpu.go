// Package gpu discovers a node's GPUs through NVML: the real driver, or
// go-nvml's mock machines when a flag asks for them (never as a fallback).
package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one physical GPU as NVML reports it.
type Device struct {
	Index     int
	UUID      string
	Model     string
	MemoryMiB int64
	BusID     string
	NUMA      int // from sysfs on a real node; 0 where unknown
	// NVLink and PCIeSwitch are the indices of the other GPUs this one
	// reaches over NVLink, and behind a common PCIe switch (topology.go).
	NVLink, PCIeSwitch []int
	// MIG is the GPU's MIG state; nil when MIG mode is off.
	MIG *MIG
	// MIGCapable: NVML answers the GPU's MIG mode, on or off.
	MIGCapable bool
}

// Discover initialises lib and lists its GPUs in index order. The error
// says what to fix when the driver library is missing. On an error after
// the init it shuts lib down again: NVML counts inits, and one left over
// would keep the next Shutdown from letting NVML list the GPUs afresh.
func Discover(lib nvml.Interface) ([]Device, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialise NVML (looked for libnvidia-ml.so.1: install the NVIDIA driver on the node and run vgpud with the NVIDIA container runtime and NVIDIA_VISIBLE_DEVICES=all, or choose a mock with --gpu-backend=mock:dgxa100): %s", nvml.ErrorString(ret))
	}
	devs, err := list(lib)
	if err != nil {
		lib.Shutdown()
		return nil, err
	}
	return devs, nil
}

// list describes lib's GPUs, initialised.
func list(lib nvml.Interface) ([]Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count GPUs: %s", nvml.ErrorString(ret))
	}
	out := make([]Device, 0, n)
	handles := make([]nvml.Device, 0, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: get handle: %s", i, nvml.ErrorString(ret))
		}
		dev, err := describe(i, d)
		if err != nil {
			return nil, err
		}
		// NVML answers the mode of a GPU that can run MIG (NOT_SUPPORTED,
		// or an old driver's error, for one that cannot); MIG state is
		// read only where it is on.
		mode, _, ret := d.GetMigMode()
		dev.MIGCapable = ret == nvml.SUCCESS
		if dev.MIGCapable && mode == nvml.DEVICE_MIG_ENABLE {
			if dev.MIG, err = migOf(lib, d); err != nil {
				return nil, fmt.Errorf("GPU %d (%s): %w", i, dev.UUID, err)
			}
		}
		out = append(out, dev)
		handles = append(handles, d)
	}
	links(out, handles)
	return out, nil
}

func describe(i int, d nvml.Device) (Device, error) {
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("GPU %d: uuid: %s", i, nvml.ErrorString(ret))
	}
	name, ret := d.GetName()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("GPU %d (%s): name: %s", i, uuid, nvml.ErrorString(ret))
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("GPU %d (%s): memory: %s", i, uuid, nvml.ErrorString(ret))
	}
	dev := Device{Index: i, UUID: uuid, Model: name, MemoryMiB: int64(mem.Total >> 20)}
	if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
		dev.BusID = busID(pci.BusId)
	}
	dev.NUMA = numaNode(d, dev.BusID)
	return dev, nil
}

// busID reads NVML's NUL-terminated C string.
func busID(raw [32]int8) string {
	b := make([]byte, 0, len(raw))
	for _, c := range raw {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
