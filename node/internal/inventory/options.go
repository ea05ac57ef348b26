package inventory

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/protocol"
)

// The flags of Options.
const (
	FlagSplit         = "split"
	FlagMemoryScaling = "memory-scaling"
	FlagCoreScaling   = "core-scaling"
)

// Bounds of the sharing settings, shared by the flags and the overrides
// file: MinSplit..MaxSplit virtual devices per GPU, and scaling factors
// above 0 and at most MaxScaling.
const (
	MinSplit   = 1
	MaxSplit   = protocol.MaxSplit
	MaxScaling = protocol.MaxScaledCores / 100
)

// Options are how the node shares each GPU.
type Options struct {
	Split         int     // virtual devices advertised per GPU
	MemoryScaling float64 // > 1 oversubscribes memory
	CoreScaling   float64
}

// DefaultOptions share each GPU ten ways, unscaled.
func DefaultOptions() Options { return Options{Split: 10, MemoryScaling: 1, CoreScaling: 1} }

// Scaling is what o makes of the inventory.
func (o Options) Scaling() Scaling {
	return Scaling{Split: o.Split, Memory: o.MemoryScaling, Cores: o.CoreScaling}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: FlagSplit, Usage: fmt.Sprintf("virtual devices advertised per GPU, how many containers may share one (%d..%d)", MinSplit, MaxSplit), Value: o.Split, Destination: &o.Split},
		&cli.Float64Flag{Name: FlagMemoryScaling, Usage: fmt.Sprintf("factor on each GPU's memory; above 1 oversubscribes (at most %d)", MaxScaling), Value: o.MemoryScaling, Destination: &o.MemoryScaling},
		&cli.Float64Flag{Name: FlagCoreScaling, Usage: fmt.Sprintf("factor on each GPU's cores (at most %d)", MaxScaling), Value: o.CoreScaling, Destination: &o.CoreScaling},
	}
}

// FileSettings are what node-overrides.yaml may set of o, bound to it.
func (o *Options) FileSettings() []configapi.Setting {
	return []configapi.Setting{
		configapi.Bind("split", FlagSplit, &o.Split).Range(MinSplit, MaxSplit),
		configapi.Bind("memoryScaling", FlagMemoryScaling, &o.MemoryScaling),
		configapi.Bind("coreScaling", FlagCoreScaling, &o.CoreScaling),
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	if o.Split < MinSplit || o.Split > MaxSplit {
		errs = append(errs, field.Invalid(field.NewPath(FlagSplit), o.Split, fmt.Sprintf("want %d..%d", MinSplit, MaxSplit)))
	}
	for _, s := range []struct {
		flag string
		f    float64
	}{{FlagMemoryScaling, o.MemoryScaling}, {FlagCoreScaling, o.CoreScaling}} {
		if s.f <= 0 || s.f > MaxScaling {
			errs = append(errs, field.Invalid(field.NewPath(s.flag), s.f, fmt.Sprintf("want a factor above 0 and at most %d (1 = no oversubscription)", MaxScaling)))
		}
	}
	return errs
}
