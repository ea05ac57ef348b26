package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/internal/configapi"
)

// The flags of Options.
const (
	FlagBackend = "gpu-backend"
	FlagExclude = "exclude-gpus"
)

// Options are where the node's GPUs come from, and which it leaves alone.
type Options struct {
	GPUBackend  string   // "nvml", "mock:<machine>" or "fake:<spec>" (Backends)
	ExcludeGPUs []string // GPUs left alone, by UUID or index
}

// DefaultOptions are the GPUs of the real driver, all of them.
func DefaultOptions() Options { return Options{GPUBackend: "nvml"} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagBackend, Usage: "where GPUs come from: " + Backends(), Value: o.GPUBackend, Destination: &o.GPUBackend},
		&cli.StringSliceFlag{Name: FlagExclude, Usage: "GPUs vgpud leaves alone, by index or UUID (comma-separated)",
			Action: func(_ *cli.Context, v []string) error {
				o.ExcludeGPUs = slices.DeleteFunc(v, func(s string) bool { return s == "" })
				return nil
			}},
	}
}

// FileSettings are what node-overrides.yaml may set of o, bound to it.
// backend is for test clusters whose nodes mock different machines; a
// real node keeps "nvml".
func (o *Options) FileSettings() []configapi.Setting {
	return []configapi.Setting{
		configapi.Bind("exclude", FlagExclude, &o.ExcludeGPUs),
		configapi.Bind("backend", FlagBackend, &o.GPUBackend),
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	if err := ValidateBackend(o.GPUBackend); err != nil {
		errs = append(errs, field.Invalid(field.NewPath(FlagBackend), o.GPUBackend, err.Error()))
	}
	if slices.Contains(o.ExcludeGPUs, "") {
		errs = append(errs, field.Invalid(field.NewPath(FlagExclude), strings.Join(o.ExcludeGPUs, ","), "an empty entry; want GPU indexes or UUIDs"))
	}
	return errs
}

// Excluded drops the GPUs o excludes by index or UUID. An entry that
// matches no GPU is an error: it is a typo or the wrong node.
func (o Options) Excluded(devs []Device) ([]Device, error) {
	out, unmatched := o.Exclude(devs)
	if len(unmatched) > 0 {
		return nil, fmt.Errorf("exclude %q matches no GPU on this node; want an index 0..%d or one of its UUIDs", unmatched[0], len(devs)-1)
	}
	return out, nil
}

// Exclude is devs without the excluded GPUs, and the exclusions that
// match none: after a rescan, a GPU excluded by UUID may be the one gone.
func (o Options) Exclude(devs []Device) ([]Device, []string) {
	matched := make([]bool, len(o.ExcludeGPUs))
	var out []Device
	for _, d := range devs {
		hit := false
		for i, e := range o.ExcludeGPUs {
			if e == d.UUID || e == strconv.Itoa(d.Index) {
				matched[i], hit = true, true
			}
		}
		if !hit {
			out = append(out, d)
		}
	}
	var unmatched []string
	for i, ok := range matched {
		if !ok {
			unmatched = append(unmatched, o.ExcludeGPUs[i])
		}
	}
	return out, unmatched
}
