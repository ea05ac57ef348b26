package server

import (
	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagListen         = "listen"
	FlagExtenderListen = "extender-listen"
)

// Options are the leader's listeners.
type Options struct {
	Listen         string // HTTPS: the webhook and the probes
	ExtenderListen string // mutual TLS: the extender, for kube-scheduler only
}

// DefaultOptions listen on 9443 and 9444.
func DefaultOptions() Options { return Options{Listen: ":9443", ExtenderListen: ":9444"} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagListen, Usage: "HTTPS address of the webhook and the /healthz and /readyz probes", Value: o.Listen, Destination: &o.Listen},
		&cli.StringFlag{Name: FlagExtenderListen, Usage: "HTTPS address of the scheduler extender; callers must present kube-scheduler's client certificate from the TLS Secret", Value: o.ExtenderListen, Destination: &o.ExtenderListen},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	if o.Listen == "" {
		errs = append(errs, field.Invalid(field.NewPath(FlagListen), "", "want an address such as :9443"))
	}
	if o.ExtenderListen == "" || o.ExtenderListen == o.Listen {
		errs = append(errs, field.Invalid(field.NewPath(FlagExtenderListen), o.ExtenderListen, "want an address other than --"+FlagListen+"'s, such as :9444"))
	}
	return errs
}
