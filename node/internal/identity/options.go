package identity

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagNRISocket           = "nri-socket"
	FlagNRIExemptNamespaces = "nri-exempt-namespaces"
	FlagNRIEarlyNamespaces  = "nri-early-namespaces"
)

// Options are how the node learns each container's pod.
type Options struct {
	// NRISocket is the container runtime's NRI socket. Where it is
	// present the runtime names each container's pod to vgpud's hook;
	// where it is not, or "" here, the node guesses, without NRI.
	NRISocket string
	// NRIExemptNamespaces keep every GPU their containers' images or pods
	// name: vgpud's own and the GPU operator's, whose pods read or serve
	// every GPU. Never a tenant's.
	NRIExemptNamespaces []string
	// NRIEarlyNamespaces' containers start even before vgpud's informer
	// has seen their pod, with no GPU, rather than wait: the cluster's,
	// whose network pods must start before vgpud after a reboot. A pod of
	// theirs that vgpud has seen is judged like any other.
	NRIEarlyNamespaces []string
}

// DefaultOptions are containerd's NRI socket, vgpud's and the GPU
// operator's namespaces exempt and the cluster's early.
func DefaultOptions() Options {
	return Options{
		NRISocket:           "/var/run/nri/nri.sock",
		NRIExemptNamespaces: []string{"vgpud-system", "gpu-operator"},
		NRIEarlyNamespaces:  []string{"kube-system"},
	}
}

// NRISocketFlag is --nri-socket, which `vgpud preflight` shares with the
// role.
func (o *Options) NRISocketFlag() cli.Flag {
	return &cli.StringFlag{Name: FlagNRISocket, Usage: "the container runtime's NRI socket: where present, the runtime names each container's pod and vgpud sets its GPUs as it is created; where absent, or empty here, the node guesses which pod kubelet admits", Value: o.NRISocket, Destination: &o.NRISocket}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	notEmpty := func(v []string) []string { return slices.DeleteFunc(v, func(s string) bool { return s == "" }) }
	return []cli.Flag{
		o.NRISocketFlag(),
		&cli.StringSliceFlag{Name: FlagNRIExemptNamespaces, Usage: "namespaces whose containers keep the GPUs their image or pod names, and are never held up by vgpud's informer (vgpud's own, the GPU operator's; never a tenant's)", Value: cli.NewStringSlice(o.NRIExemptNamespaces...),
			Action: func(_ *cli.Context, v []string) error { o.NRIExemptNamespaces = notEmpty(v); return nil }},
		&cli.StringSliceFlag{Name: FlagNRIEarlyNamespaces, Usage: "namespaces whose containers start with no GPU when vgpud's informer has not seen their pod yet, rather than wait (the cluster's pod network); a pod vgpud has seen is judged like any other", Value: cli.NewStringSlice(o.NRIEarlyNamespaces...),
			Action: func(_ *cli.Context, v []string) error { o.NRIEarlyNamespaces = notEmpty(v); return nil }},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	if o.NRISocket != "" && !filepath.IsAbs(o.NRISocket) {
		errs = append(errs, field.Invalid(field.NewPath(FlagNRISocket), o.NRISocket, "want an absolute path such as /var/run/nri/nri.sock, or empty to guess which pod kubelet admits"))
	}
	for _, l := range []struct {
		flag string
		list []string
	}{{FlagNRIExemptNamespaces, o.NRIExemptNamespaces}, {FlagNRIEarlyNamespaces, o.NRIEarlyNamespaces}} {
		for _, ns := range l.list {
			if len(validation.IsDNS1123Label(ns)) > 0 {
				errs = append(errs, field.Invalid(field.NewPath(l.flag), strings.Join(l.list, ","), fmt.Sprintf("%q is not a namespace name", ns)))
				break
			}
		}
	}
	return errs
}
