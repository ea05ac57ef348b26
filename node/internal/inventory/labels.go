package inventory

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Labels are the node's own report of what it serves, for nodeSelectors
// and affinities: wellknown's LabelGPU* and LabelMIG* from devs as found
// and the scaling the node offers them with. A node with no GPU says so
// (count 0, product none) rather than dropping them.
func Labels(devs []gpu.Device, s Scaling) map[string]string {
	product, memory, split, capable, inMIG := "", int64(-1), 0, false, 0
	for _, d := range devs {
		switch p := labelValue(d.Model); {
		case product == "":
			product = p
		case product != p:
			product = "mixed"
		}
		mem := d.MemoryMiB
		if d.MIG == nil {
			mem = int64(float64(d.MemoryMiB) * s.Memory)
			split = s.Split
		} else {
			inMIG++
		}
		if memory < 0 || mem < memory {
			memory = mem
		}
		capable = capable || d.MIGCapable || d.MIG != nil
	}
	mode := wellknown.MIGMixed
	switch {
	case len(devs) == 0:
		product, memory = "none", 0
		mode = wellknown.MIGDisabled
	case inMIG == 0:
		mode = wellknown.MIGDisabled
	case inMIG == len(devs):
		mode = wellknown.MIGEnabled
	}
	return map[string]string{
		wellknown.LabelGPUProduct: product,
		wellknown.LabelGPUCount:   strconv.Itoa(len(devs)),
		wellknown.LabelGPUMemory:  strconv.FormatInt(memory, 10),
		wellknown.LabelGPUSplit:   strconv.Itoa(split),
		wellknown.LabelMIGCapable: strconv.FormatBool(capable),
		wellknown.LabelMIGMode:    mode,
	}
}

var notInLabel = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// labelValue is NVIDIA's model name as GPU feature discovery writes it
// (spaces as dashes), held to a label value's shape.
func labelValue(model string) string {
	v := notInLabel.ReplaceAllString(strings.TrimSpace(model), "-")
	if len(v) > 63 {
		v = v[:63]
	}
	v = strings.Trim(v, "-._")
	if v == "" {
		return "unknown"
	}
	return v
}
