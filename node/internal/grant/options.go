package grant

import (
	"path/filepath"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FlagInterposerDir is Options.InterposerDir's flag.
const FlagInterposerDir = "interposer-dir"

// Options are the settings of what a slice mounts.
type Options struct {
	// InterposerDir is a host directory with HAMi-core's libvgpu.so to
	// mount into GPU containers; "" mounts nothing.
	InterposerDir string
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagInterposerDir, Usage: "host directory holding HAMi-core's libvgpu.so, mounted into GPU containers with an ld.so.preload; empty mounts nothing", Value: o.InterposerDir, Destination: &o.InterposerDir},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	if o.InterposerDir != "" && !filepath.IsAbs(o.InterposerDir) {
		return field.ErrorList{field.Invalid(field.NewPath(FlagInterposerDir), o.InterposerDir, "want an absolute host path, such as /usr/local/vgpu")}
	}
	return nil
}
