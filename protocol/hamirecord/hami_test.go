package hamirecord

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
)

// The forms HAMi v2.3 to v2.10 write, from its Encode functions.
func TestDecodeHAMiAllocation(t *testing.T) {
	two := protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{
		{Name: "hami#0", GPUs: []protocol.GPUSlice{{UUID: "GPU-aaa", MemoryMiB: 3000, Cores: 30}}},
		{Name: "hami#1", GPUs: []protocol.GPUSlice{{UUID: "GPU-bbb", MemoryMiB: 4000}, {UUID: "GPU-ccc", MemoryMiB: 4000}}},
	}}
	for _, tc := range []struct {
		name, raw string
		want      protocol.Assignment
	}{
		{"v2.6, a last container without GPU", "GPU-aaa,NVIDIA,3000,30:;GPU-bbb,NVIDIA,4000,0:GPU-ccc,NVIDIA,4000,0:;;", two},
		{"v2.4, its padding device", "GPU-aaa,NVIDIA,3000,30:;GPU-bbb,NVIDIA,4000,0:GPU-ccc,NVIDIA,4000,0:;,,0,0:;", two},
		{"v2.8, a leading empty entry", ";GPU-aaa,NVIDIA,3000,30:;", protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{
			{Name: "hami#1", GPUs: []protocol.GPUSlice{{UUID: "GPU-aaa", MemoryMiB: 3000, Cores: 30}}}}}},
		{"a MIG instance books its GPU", "GPU-aaa[1-0],NVIDIA,5120,0:;", protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{
			{Name: "hami#0", GPUs: []protocol.GPUSlice{{UUID: "GPU-aaa", MemoryMiB: 5120}}}}}},
		{"nothing held", ";;", protocol.Assignment{Version: protocol.Version, Node: "n1"}},
		{"another vendor's device is not vgpud's", "DCU-1,DCU,3000,30:GPU-aaa,NVIDIA,1000,10:;", protocol.Assignment{Version: protocol.Version, Node: "n1", Containers: []protocol.ContainerAssignment{
			{Name: "hami#0", GPUs: []protocol.GPUSlice{{UUID: "GPU-aaa", MemoryMiB: 1000, Cores: 10}}}}}},
	} {
		got, err := DecodeHAMiAllocation(tc.raw, "n1")
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q -> %+v, %v; want %+v", tc.name, tc.raw, got, err, tc.want)
		}
	}
}

func TestDecodeHAMiAllocationRefuses(t *testing.T) {
	for raw, want := range map[string]string{
		"GPU-aaa,NVIDIA,3000:;":                      "want UUID,TYPE,MiB,CORES",
		"GPU-aaa,NVIDIA,-1,30:;":                     "is not MiB",
		"GPU-aaa,NVIDIA,lots,30:;":                   "is not MiB",
		"GPU-aaa,NVIDIA,3000,101:;":                  "is not a percentage",
		",NVIDIA,3000,10:;":                          "no UUID",
		"GPU-aaa,NVIDIA,1,1:GPU-aaa,NVIDIA,1,1:;":    "names GPU GPU-aaa twice",
		strings.Repeat("GPU-aaa,NVIDIA,1,1:;", 1000): "at most",
	} {
		if _, err := DecodeHAMiAllocation(raw, "n1"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60q: %v; want an error saying %q", raw, err, want)
		}
	}
}
