// Package hamirecord reads HAMi's record of a pod it placed, so that vgpud,
// installed beside HAMi's pods, never places on top of them.
package hamirecord

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpud/vgpud/protocol"
)

// HAMi's record of what its scheduler gave a running pod. vgpud reads it
// so that, installed beside pods HAMi placed, it never places on top of
// them; it never writes it.
const (
	// AnnotationHAMiAllocated lists each container's devices: containers
	// end in ";", devices in ":", and a device is "UUID,TYPE,MiB,CORES"
	// (HAMi v2.3 on; a MIG instance's UUID carries "[TEMPLATE-INDEX]").
	AnnotationHAMiAllocated = "hami.io/vgpu-devices-allocated"
	// AnnotationHAMiNode is the node HAMi's scheduler chose.
	AnnotationHAMiNode = "hami.io/vgpu-node"
	// hamiContainer prefixes the names vgpud gives HAMi's containers,
	// which the record lists by position, not name (and whose positions
	// changed between HAMi versions): each is booked as an app container,
	// so their slices add up, the safe side.
	hamiContainer = "hami#"
	// MaxHAMiBytes bounds the record read: HAMi writes about 60 bytes a
	// device.
	MaxHAMiBytes = 16 << 10
)

// DecodeHAMiAllocation reads HAMi's record of a pod on node as an
// assignment: one container per entry that holds devices, in order, named
// "hami#0", "hami#1"... Malformed entries are refused; other vendors'
// devices, and the padding HAMi writes for containers without a device
// (",,0,0" or nothing), are skipped.
func DecodeHAMiAllocation(raw, node string) (protocol.Assignment, error) {
	if len(raw) > MaxHAMiBytes {
		return protocol.Assignment{}, fmt.Errorf("%s of %d bytes: at most %d are read", AnnotationHAMiAllocated, len(raw), MaxHAMiBytes)
	}
	a := protocol.Assignment{Version: protocol.Version, Node: node}
	for i, entry := range strings.Split(strings.TrimSuffix(raw, ";"), ";") {
		var gpus []protocol.GPUSlice
		for _, dev := range strings.Split(strings.TrimSuffix(entry, ":"), ":") {
			s, skip, err := decodeHAMiDevice(dev)
			if err != nil {
				return protocol.Assignment{}, fmt.Errorf("%s: container entry %d: %w", AnnotationHAMiAllocated, i, err)
			}
			if skip {
				continue
			}
			for _, g := range gpus {
				if g.UUID == s.UUID {
					return protocol.Assignment{}, fmt.Errorf("%s: container entry %d names GPU %s twice", AnnotationHAMiAllocated, i, s.UUID)
				}
			}
			gpus = append(gpus, s)
		}
		if len(gpus) > 0 {
			a.Containers = append(a.Containers, protocol.ContainerAssignment{Name: hamiContainer + strconv.Itoa(i), GPUs: gpus})
		}
	}
	return a, nil
}

// decodeHAMiDevice reads "UUID,TYPE,MiB,CORES"; skip is set for the
// padding of a container without devices.
func decodeHAMiDevice(dev string) (s protocol.GPUSlice, skip bool, err error) {
	if dev == "" {
		return protocol.GPUSlice{}, true, nil
	}
	f := strings.Split(dev, ",")
	if len(f) < 4 {
		return protocol.GPUSlice{}, false, fmt.Errorf("device %q: want UUID,TYPE,MiB,CORES", dev)
	}
	if f[0] == "" && f[1] == "" {
		return protocol.GPUSlice{}, true, nil
	}
	if f[1] != "NVIDIA" {
		// Another vendor's device: not a GPU vgpud places on.
		return protocol.GPUSlice{}, true, nil
	}
	uuid, _, _ := strings.Cut(f[0], "[") // a MIG instance books its GPU
	mem, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || mem < 0 {
		return protocol.GPUSlice{}, false, fmt.Errorf("device %q: memory %q is not MiB", dev, f[2])
	}
	cores, err := strconv.Atoi(f[3])
	if err != nil || cores < 0 || cores > 100 {
		return protocol.GPUSlice{}, false, fmt.Errorf("device %q: cores %q is not a percentage", dev, f[3])
	}
	if uuid == "" {
		return protocol.GPUSlice{}, false, fmt.Errorf("device %q: no UUID", dev)
	}
	return protocol.GPUSlice{UUID: uuid, MemoryMiB: mem, Cores: cores}, false, nil
}
