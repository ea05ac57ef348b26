package gpuuse

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// The flags of Options.
const (
	FlagGPUUsage        = "gpu-usage"
	FlagGPUUsagePeriod  = "gpu-usage-period"
	FlagGPUUsageMargin  = "gpu-usage-margin"
	FlagGPUUsageReserve = "gpu-usage-reserve"
	FlagGPUUsageRecord  = "gpu-usage-record"
)

// Bounds of the settings. A container over its slice holds the memory
// for up to two periods: sampling NVML more often than MinGPUUsagePeriod
// costs more than it tells, and slower than MaxGPUUsagePeriod lets a
// neighbour fail. MaxGPUUsageMarginMiB is more than any CUDA context
// needs.
const (
	MinGPUUsagePeriod    = 100 * time.Millisecond
	MaxGPUUsagePeriod    = 10 * time.Second
	MaxGPUUsageMarginMiB = 16384
)

// Auto, the default --gpu-usage, enforces on a node where the runtime
// hook runs and reports on one where it does not: enforcement kills only
// processes of containers the hook granted a slice, so without the hook
// it would kill nothing and claim otherwise. It became the default once
// the GPU proof (make nvml) ended a forked holder on real hardware
// (docs/isolation.md).
const Auto = "auto"

// usageValues are what --gpu-usage accepts.
func usageValues() []string { return append([]string{Auto}, usage.Modes...) }

// Options are what the node does with each container's measured GPU use.
type Options struct {
	// GPUUsage is "auto", "off", "report", or "enforce" (also kill the
	// largest process of a container over its slice's memory). See
	// usage.Mode and Auto.
	GPUUsage string
	// GPUUsagePeriod is how often the node samples its GPUs' processes.
	GPUUsagePeriod time.Duration
	// GPUUsageMargin is how many MiB a container may hold on a GPU past
	// its slice before it is over: room for CUDA contexts, which
	// HAMi-core's limit does not count either.
	GPUUsageMargin int64
	// GPUUsageReserve is how many MiB of each GPU its processes may not
	// take together: past its memory less this, every container above its
	// slice is over, margin or not.
	GPUUsageReserve int64
	// GPUUsageRecord is the file where the enforcer remembers each listed
	// PID's first holder and the containers it ended, on a host path that
	// outlives the container; "{node}" in it is the node's name, so that
	// nodes sharing a host path (a test cluster) keep apart. "" keeps it
	// in memory only.
	GPUUsageRecord string
}

// DefaultOptions enforce where the runtime hook runs (Auto).
func DefaultOptions() Options {
	return Options{GPUUsage: Auto, GPUUsagePeriod: time.Second, GPUUsageMargin: 1024, GPUUsageRecord: "/var/lib/vgpud/gpu-usage-{node}.json"}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagGPUUsage, Usage: "what the node does with each container's GPU use, which it samples from the driver: " + strings.Join(usageValues(), ", ") +
			" (enforce also kills the largest process of a container over its slice's memory on a GPU, and needs the NRI hook; auto enforces where the hook runs and reports elsewhere)", Value: o.GPUUsage, Destination: &o.GPUUsage},
		&cli.DurationFlag{Name: FlagGPUUsagePeriod, Usage: fmt.Sprintf("how often the node samples its GPUs' processes (%s..%s); a container over its slice holds the memory for at most two periods", MinGPUUsagePeriod, MaxGPUUsagePeriod), Value: o.GPUUsagePeriod, Destination: &o.GPUUsagePeriod},
		&cli.Int64Flag{Name: FlagGPUUsageMargin, Usage: "MiB a container may hold on a GPU past its slice before it is over: room for CUDA contexts, which the slice does not count, on a GPU that has room", Value: o.GPUUsageMargin, Destination: &o.GPUUsageMargin},
		&cli.Int64Flag{Name: FlagGPUUsageReserve, Usage: "MiB of each GPU its processes may not take together: past its memory less this, every container above its slice is over, margin or not", Value: o.GPUUsageReserve, Destination: &o.GPUUsageReserve},
		&cli.StringFlag{Name: FlagGPUUsageRecord, Usage: "file where the node remembers who held each GPU process's PID first and the containers it ended, on a host path; {node} is the node's name; empty keeps it in memory only", Value: o.GPUUsageRecord, Destination: &o.GPUUsageRecord},
	}
}

// FileSettings are what node-overrides.yaml may set of o, bound to it.
func (o *Options) FileSettings() []configapi.Setting {
	return []configapi.Setting{configapi.Bind("gpuUsage", FlagGPUUsage, &o.GPUUsage).OneOf(usageValues()...)}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	invalid := func(flag string, v any, want string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), v, want))
	}
	if _, err := usage.ParseMode(o.GPUUsage); err != nil && o.GPUUsage != Auto {
		invalid(FlagGPUUsage, o.GPUUsage, "want one of "+strings.Join(usageValues(), ", "))
	}
	if o.GPUUsagePeriod < MinGPUUsagePeriod || o.GPUUsagePeriod > MaxGPUUsagePeriod {
		invalid(FlagGPUUsagePeriod, o.GPUUsagePeriod, fmt.Sprintf("want from %s to %s", MinGPUUsagePeriod, MaxGPUUsagePeriod))
	}
	if o.GPUUsageMargin < 0 || o.GPUUsageMargin > MaxGPUUsageMarginMiB {
		invalid(FlagGPUUsageMargin, o.GPUUsageMargin, fmt.Sprintf("want MiB from 0 to %d", MaxGPUUsageMarginMiB))
	}
	if o.GPUUsageReserve < 0 || o.GPUUsageReserve > protocol.MaxMemoryMiB {
		invalid(FlagGPUUsageReserve, o.GPUUsageReserve, fmt.Sprintf("want MiB from 0 to %d", protocol.MaxMemoryMiB))
	}
	if o.GPUUsageRecord != "" && !filepath.IsAbs(o.GPUUsageRecord) {
		invalid(FlagGPUUsageRecord, o.GPUUsageRecord, "want an absolute path on a host path, such as /var/lib/vgpud/gpu-usage-{node}.json, or empty to keep it in memory only")
	}
	return errs
}

// ForHook is o with Auto made the mode it stands for on a node where
// the runtime hook runs (hook) or does not.
func (o Options) ForHook(hook bool) Options {
	if o.GPUUsage == Auto {
		o.GPUUsage = usage.Report.String()
		if hook {
			o.GPUUsage = usage.Enforce.String()
		}
	}
	return o
}
