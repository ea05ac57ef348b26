package inventory

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestLabelsReportWhatTheNodeServes(t *testing.T) {
	a100 := gpu.Device{Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, MIGCapable: true}
	l4 := gpu.Device{Model: "NVIDIA L4", MemoryMiB: 23034}
	inMIG := a100
	inMIG.MIG = &gpu.MIG{}
	for _, c := range []struct {
		name string
		devs []gpu.Device
		s    Scaling
		want map[string]string
	}{
		{"eight A100s, memory oversubscribed", []gpu.Device{a100, a100, a100, a100, a100, a100, a100, a100}, Scaling{Split: 10, Memory: 1.5},
			map[string]string{"product": "NVIDIA-A100-SXM4-40GB", "count": "8", "memory": "61440", "split": "10", "capable": "true", "mode": wellknown.MIGDisabled}},
		{"L4s and an A100 in MIG mode", []gpu.Device{l4, l4, inMIG}, Scaling{Split: 4, Memory: 1},
			map[string]string{"product": "mixed", "count": "3", "memory": "23034", "split": "4", "capable": "true", "mode": wellknown.MIGMixed}},
		{"only MIG", []gpu.Device{inMIG}, Scaling{Split: 10, Memory: 2},
			map[string]string{"product": "NVIDIA-A100-SXM4-40GB", "count": "1", "memory": "40960", "split": "0", "capable": "true", "mode": wellknown.MIGEnabled}},
		{"no GPU", nil, Scaling{Split: 10, Memory: 1},
			map[string]string{"product": "none", "count": "0", "memory": "0", "split": "0", "capable": "false", "mode": wellknown.MIGDisabled}},
		{"a name no label can hold", []gpu.Device{{Model: " Tesla (R) V100/PCIe  " + string(make([]byte, 80)), MemoryMiB: 16}}, Scaling{Split: 1, Memory: 1},
			map[string]string{"product": "Tesla-R-V100-PCIe", "count": "1", "memory": "16", "split": "1", "capable": "false", "mode": wellknown.MIGDisabled}},
		// Cut to a label's 63 characters, then trimmed of what may not
		// end one.
		{"a long name", []gpu.Device{{Model: strings.Repeat("ab", 31) + "-cd", MemoryMiB: 16}}, Scaling{Split: 1, Memory: 1},
			map[string]string{"product": strings.Repeat("ab", 31), "count": "1", "memory": "16", "split": "1", "capable": "false", "mode": wellknown.MIGDisabled}},
	} {
		got := Labels(c.devs, c.s)
		want := map[string]string{
			wellknown.LabelGPUProduct: c.want["product"], wellknown.LabelGPUCount: c.want["count"], wellknown.LabelGPUMemory: c.want["memory"],
			wellknown.LabelGPUSplit: c.want["split"], wellknown.LabelMIGCapable: c.want["capable"], wellknown.LabelMIGMode: c.want["mode"],
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: %v, want %v", c.name, got, want)
		}
		for k := range got {
			if !slices.Contains(wellknown.NodeReportLabels(), k) {
				t.Errorf("%s: label %s is not among NodeReportLabels, which a revert takes off", c.name, k)
			}
		}
	}
}
