package dra

import (
	"path/filepath"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/protocol/dradevices"
)

// The flags of Options.
const (
	FlagDRA                = "dra"
	FlagDRARecord          = "dra-record"
	FlagKubeletPluginsDir  = "kubelet-plugins-dir"
	FlagKubeletRegistryDir = "kubelet-registry-dir"
	FlagDRACDIDir          = "dra-cdi-dir"
)

// Options say whether the node serves its GPUs to DRA claims, and where
// it meets kubelet and the runtime to do so.
type Options struct {
	// DRA serves the node's GPUs as DRA devices that kube-scheduler books
	// and kubelet prepares, instead of through the device plugin: the
	// node then takes claims only.
	DRA bool
	// DRARecord is the file where the node remembers what it prepared
	// for which pods, on a host path; "{node}" is the node's name.
	DRARecord string
	// PluginsDir and RegistryDir are kubelet's: the driver's socket goes
	// in a directory of its own under PluginsDir, its registration in
	// RegistryDir. Both paths are the same in vgpud's container as on
	// the host.
	PluginsDir, RegistryDir string
	// CDIDir is where the node writes each claim's CDI spec: a directory
	// the runtime reads CDI specs from.
	CDIDir string
}

// DefaultOptions serve through the device plugin.
func DefaultOptions() Options {
	return Options{DRARecord: "/var/lib/vgpud/dra-{node}.json", PluginsDir: "/var/lib/kubelet/plugins", RegistryDir: "/var/lib/kubelet/plugins_registry", CDIDir: "/var/run/cdi"}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: FlagDRA, Usage: "serve this node's GPUs to DRA claims (Kubernetes 1.36+, driver " + dradevices.DriverName + ") instead of the device plugin: kube-scheduler books them, kubelet prepares them; the node then takes claims only", Value: o.DRA, Destination: &o.DRA},
		&cli.StringFlag{Name: FlagDRARecord, Usage: "file where the node remembers which claims it prepared for which pods, on a host path; {node} is the node's name", Value: o.DRARecord, Destination: &o.DRARecord},
		&cli.StringFlag{Name: FlagKubeletPluginsDir, Usage: "kubelet's plugins directory (the DRA driver's socket goes in " + dradevices.DriverName + " under it), the same path in vgpud's container as on the host", Value: o.PluginsDir, Destination: &o.PluginsDir},
		&cli.StringFlag{Name: FlagKubeletRegistryDir, Usage: "kubelet's plugin registration directory, the same path in vgpud's container as on the host", Value: o.RegistryDir, Destination: &o.RegistryDir},
		&cli.StringFlag{Name: FlagDRACDIDir, Usage: "directory the runtime reads CDI specs from, where the node writes each DRA claim's", Value: o.CDIDir, Destination: &o.CDIDir},
	}
}

// FileSettings are what node-overrides.yaml may set of o, bound to it.
func (o *Options) FileSettings() []configapi.Setting {
	return []configapi.Setting{configapi.Bind("dra", FlagDRA, &o.DRA)}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	for _, s := range []struct{ flag, path string }{{FlagDRARecord, o.DRARecord}, {FlagKubeletPluginsDir, o.PluginsDir}, {FlagKubeletRegistryDir, o.RegistryDir}, {FlagDRACDIDir, o.CDIDir}} {
		if !filepath.IsAbs(s.path) {
			errs = append(errs, field.Invalid(field.NewPath(s.flag), s.path, "want an absolute path on the host"))
		}
	}
	return errs
}

// Dirs are where the driver meets kubelet.
func (o Options) Dirs() KubeletDirs {
	return KubeletDirs{Plugin: filepath.Join(o.PluginsDir, dradevices.DriverName), Registry: o.RegistryDir}
}
