package rescan

import (
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FlagRescanInterval is Options.RescanInterval's flag.
const FlagRescanInterval = "rescan-interval"

// Options say how often the node looks again.
type Options struct {
	// RescanInterval is how often the node looks for GPUs added or gone;
	// 0 never.
	RescanInterval time.Duration
}

// DefaultOptions look every 30 seconds.
func DefaultOptions() Options { return Options{RescanInterval: 30 * time.Second} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: FlagRescanInterval, Usage: "how often the node looks for GPUs added or gone (the NVIDIA driver's PCI devices in sysfs) and for MIG instances others made or destroyed, and, on a change, serves what is there now; 0 never", Value: o.RescanInterval, Destination: &o.RescanInterval},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	if o.RescanInterval != 0 && o.RescanInterval < time.Second {
		return field.ErrorList{field.Invalid(field.NewPath(FlagRescanInterval), o.RescanInterval, "want 0 (never) or at least 1s")}
	}
	return nil
}
