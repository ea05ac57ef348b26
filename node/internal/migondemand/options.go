package migondemand

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The flags of Options.
const (
	FlagMIGOnDemand         = "mig-on-demand"
	FlagMIGOnDemandProfiles = "mig-on-demand-profiles"
	FlagMIGRecord           = "mig-record"
)

// Options say where the node makes MIG instances on demand.
type Options struct {
	// MIGOnDemand are the GPUs in MIG mode it makes instances on, by
	// index or UUID, or "all"; empty for none. Needs the runtime hook.
	MIGOnDemand []string
	// MIGOnDemandProfiles are those it may make; empty for every
	// whole-instance profile the driver lists.
	MIGOnDemandProfiles []string
	// MIGRecord is the file where it records what it made: a host path
	// that outlives the container, so that the next one finds them.
	MIGRecord string
}

// DefaultOptions make nothing, and keep the record on the host.
func DefaultOptions() Options { return Options{MIGRecord: "/var/lib/vgpud/mig-made.json"} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	notEmpty := func(v []string) []string { return slices.DeleteFunc(v, func(s string) bool { return s == "" }) }
	return []cli.Flag{
		&cli.StringSliceFlag{Name: FlagMIGOnDemand, Usage: "GPUs in MIG mode on which the node makes an instance for each pod booked there and destroys it after, by index or UUID, or all (comma-separated; unproven on real MIG hardware); empty for none. Needs the runtime hook (NRI)",
			Action: func(_ *cli.Context, v []string) error { o.MIGOnDemand = notEmpty(v); return nil }},
		&cli.StringSliceFlag{Name: FlagMIGOnDemandProfiles, Usage: "MIG profiles the node may make on demand, e.g. 1g.10gb,3g.40gb (comma-separated); empty for every whole-instance profile the driver lists",
			Action: func(_ *cli.Context, v []string) error { o.MIGOnDemandProfiles = notEmpty(v); return nil }},
		&cli.StringFlag{Name: FlagMIGRecord, Usage: "file recording the MIG instances the node made on demand, on a host path that outlives the container", Value: o.MIGRecord, Destination: &o.MIGRecord},
	}
}

// FileSettings are what node-overrides.yaml may set of o, bound to it.
func (o *Options) FileSettings() []configapi.Setting {
	return []configapi.Setting{configapi.Bind("migOnDemand", FlagMIGOnDemand, &o.MIGOnDemand)}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	for _, p := range o.MIGOnDemandProfiles {
		if !wellknown.ValidMIGProfile(p) {
			errs = append(errs, field.Invalid(field.NewPath(FlagMIGOnDemandProfiles), strings.Join(o.MIGOnDemandProfiles, ","), fmt.Sprintf("%q is no MIG profile; want names like 1g.10gb or 3g.40gb", p)))
			break
		}
	}
	if len(o.MIGOnDemand) > 0 && o.MIGRecord == "" {
		errs = append(errs, field.Invalid(field.NewPath(FlagMIGRecord), o.MIGRecord, "empty; instances made on demand need a record, on a host path"))
	}
	return errs
}
