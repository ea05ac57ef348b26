package health

import (
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagHealthIgnoreXIDs = "health-ignore-xids"
	FlagHealthRecovery   = "health-recovery"
)

// MinHealthRecovery keeps a flapping GPU from being offered between two
// XIDs.
const MinHealthRecovery = time.Second

// Options are how the node judges a GPU's health.
type Options struct {
	HealthIgnoreXIDs []uint64 // XIDs that are the application's fault
	// HealthRecovery is how long a GPU must stay quiet after a critical
	// XID before it is offered again.
	HealthRecovery time.Duration
}

// DefaultOptions ignore the application XIDs and wait five minutes.
func DefaultOptions() Options {
	return Options{HealthIgnoreXIDs: DefaultIgnoredXIDs, HealthRecovery: 5 * time.Minute}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.Uint64SliceFlag{Name: FlagHealthIgnoreXIDs, Usage: "XIDs that do not make a GPU unhealthy (application faults)", Value: cli.NewUint64Slice(o.HealthIgnoreXIDs...),
			Action: func(_ *cli.Context, v []uint64) error { o.HealthIgnoreXIDs = v; return nil }},
		&cli.DurationFlag{Name: FlagHealthRecovery, Usage: "quiet time after a critical XID before a GPU that answers NVML again is offered again", Value: o.HealthRecovery, Destination: &o.HealthRecovery},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	if o.HealthRecovery < MinHealthRecovery {
		return field.ErrorList{field.Invalid(field.NewPath(FlagHealthRecovery), o.HealthRecovery, "want at least "+MinHealthRecovery.String())}
	}
	return nil
}
