package identity

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node/internal/cdidevices"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagNRISocket          = "nri-socket"
	FlagGPUAgentAccounts   = "gpu-agent-accounts"
	FlagNRIEarlyNamespaces = "nri-early-namespaces"
	FlagCDI                = "cdi"
	// flagNRIExemptNamespaces is gone: a namespace's name exempted
	// whoever made a namespace of that name.
	flagNRIExemptNamespaces = "nri-exempt-namespaces"
)

// Options are how the node learns each container's pod.
type Options struct {
	// NRISocket is the container runtime's NRI socket. Where it is
	// present the runtime names each container's pod to vgpud's hook;
	// where it is not, or "" here, the node guesses, without NRI.
	NRISocket string
	// GPUAgentAccounts are the ServiceAccounts whose pods keep every GPU
	// their image or pod names (vgpud's own, DCGM exporter, the GPU
	// operator's validators), in a namespace labelled
	// vgpud.io/gpu-agents=true, which only a cluster administrator may
	// set; anywhere else they are pods like any other.
	GPUAgentAccounts []string
	// NRIEarlyNamespaces' containers start even before vgpud's informer
	// has seen their pod, with no GPU, rather than wait: the cluster's,
	// whose network pods must start before vgpud after a reboot. A pod of
	// theirs that vgpud has seen is judged like any other.
	NRIEarlyNamespaces []string
	// CDI is how the hook hands a container its GPUs besides the slice's
	// env: also as the devices of the node's NVIDIA CDI spec, where the
	// runtime injects CDI devices and the spec names the GPU (auto);
	// always, refusing a grant it cannot name (on); never (off).
	CDI string
}

// DefaultOptions are containerd's NRI socket, vgpud's and the GPU
// operator's agents and the cluster's namespace early.
func DefaultOptions() Options {
	return Options{
		NRISocket:          "/var/run/nri/nri.sock",
		GPUAgentAccounts:   DefaultGPUAgentAccounts(),
		NRIEarlyNamespaces: []string{"kube-system"},
		CDI:                cdidevices.ModeAuto,
	}
}

// DefaultGPUAgentAccounts are vgpud's own ServiceAccount and those of the
// GPU operator's agents that read every GPU (its assets' names): DCGM
// and its exporter, GPU feature discovery, the validators and the MIG
// manager. Not its device plugin, whose work vgpud does.
func DefaultGPUAgentAccounts() []string {
	return []string{"vgpud", "nvidia-dcgm-exporter", "nvidia-dcgm", "nvidia-gpu-feature-discovery", "nvidia-operator-validator", "nvidia-mig-manager"}
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
		&cli.StringSliceFlag{Name: FlagGPUAgentAccounts, Usage: "ServiceAccounts whose pods keep every GPU their image or pod names (vgpud's own, the GPU operator's agents), only in a namespace a cluster administrator labelled vgpud.io/gpu-agents=true; never a tenant's", Value: cli.NewStringSlice(o.GPUAgentAccounts...),
			Action: func(_ *cli.Context, v []string) error { o.GPUAgentAccounts = notEmpty(v); return nil }},
		&cli.StringSliceFlag{Name: flagNRIExemptNamespaces, Hidden: true,
			Action: func(*cli.Context, []string) error {
				return fmt.Errorf("--%s is gone: a namespace's name exempted whoever could make a namespace of that name. Label each namespace of GPU agents vgpud.io/gpu-agents=true (only a cluster administrator may) and list their ServiceAccounts in --%s (docs/security-tenants.md)", flagNRIExemptNamespaces, FlagGPUAgentAccounts)
			}},
		&cli.StringFlag{Name: FlagCDI, Usage: "hand each container its GPUs also as CDI devices of the node's NVIDIA spec (nvidia-ctk cdi generate), with the slice's env: auto where the runtime injects CDI devices (preflight reads its configuration) and the spec names the GPU; on to require it, refusing a grant it cannot name; off for env alone", Value: o.CDI, Destination: &o.CDI},
		&cli.StringSliceFlag{Name: FlagNRIEarlyNamespaces, Usage: "namespaces whose containers start with no GPU when vgpud's informer has not seen their pod yet, rather than wait (the cluster's pod network); a pod vgpud has seen is judged like any other", Value: cli.NewStringSlice(o.NRIEarlyNamespaces...),
			Action: func(_ *cli.Context, v []string) error { o.NRIEarlyNamespaces = notEmpty(v); return nil }},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	if !slices.Contains(cdidevices.Modes(), o.CDI) {
		errs = append(errs, field.NotSupported(field.NewPath(FlagCDI), o.CDI, cdidevices.Modes()))
	}
	if o.NRISocket != "" && !filepath.IsAbs(o.NRISocket) {
		errs = append(errs, field.Invalid(field.NewPath(FlagNRISocket), o.NRISocket, "want an absolute path such as /var/run/nri/nri.sock, or empty to guess which pod kubelet admits"))
	}
	for _, l := range []struct {
		flag string
		list []string
		what string
		test func(string) []string
	}{{FlagGPUAgentAccounts, o.GPUAgentAccounts, "a ServiceAccount name", validation.IsDNS1123Subdomain}, {FlagNRIEarlyNamespaces, o.NRIEarlyNamespaces, "a namespace name", validation.IsDNS1123Label}} {
		for _, name := range l.list {
			if l.flag == FlagGPUAgentAccounts && name == "default" {
				errs = append(errs, field.Invalid(field.NewPath(l.flag), strings.Join(l.list, ","), `"default" is every namespace's ServiceAccount of pods that name none: it would make every pod of a labelled namespace a GPU agent; give the agent a ServiceAccount of its own`))
				break
			}
			if len(l.test(name)) > 0 {
				errs = append(errs, field.Invalid(field.NewPath(l.flag), strings.Join(l.list, ","), fmt.Sprintf("%q is not %s", name, l.what)))
				break
			}
		}
	}
	return errs
}
