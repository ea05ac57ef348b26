package preflight

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/containerd/containerd/v2/cmd/containerd/server/config"
	"github.com/containerd/containerd/v2/version"
	"github.com/containerd/log"
	validator "github.com/containerd/nri/plugins/default-validator"
	"github.com/sirupsen/logrus"
)

// containerdNRIPlugin is containerd's NRI plugin, by its full ID.
const containerdNRIPlugin = "io.containerd.nri.v1.nri"

// containerdDropIn is what fixes a containerd node (docs/install.md).
const containerdDropIn = "vgpud's containerd drop-in (manifests/node-setup/containerd-vgpud.toml) and restart containerd"

// containerdNRI is the part of containerd's NRI plugin settings that
// decides whether it fails closed; the validator's are NRI's own type.
type containerdNRI struct {
	Disable            bool                              `toml:"disable"`
	SocketPath         string                            `toml:"socket_path"`
	DisableConnections bool                              `toml:"disable_connections"`
	DefaultValidator   *validator.DefaultValidatorConfig `toml:"default_validator"`
}

// Containerd reads containerd's configuration at path with containerd's
// own loader (imports, merging and version migration as containerd
// does them), so an import that replaces NRI's table counts as it does
// for containerd. Imports resolve in this process's file system: the
// runtime's configuration directory must be mounted at the same path.
func Containerd(path string, w Want) Verdict {
	v := Verdict{Runtime: "containerd", Config: path}
	// containerd's loader logs what it ignores; the verdict says what
	// matters, so its log is dropped.
	quiet := logrus.New()
	quiet.Out = io.Discard
	ctx := log.WithLogger(context.Background(), logrus.NewEntry(quiet))
	files, newest, err := containerdFiles(path)
	if err != nil {
		return unreadable(v, err)
	}
	cfg := config.Config{Version: version.ConfigVersion}
	if err := config.LoadConfig(ctx, path, &cfg); err != nil {
		return unreadable(v, err)
	}
	v.Files, v.newest = files, newest
	var sec containerdNRI
	if _, err := cfg.Decode(ctx, containerdNRIPlugin, &sec); err != nil {
		return unreadable(v, fmt.Errorf("decode %s's settings: %w", containerdNRIPlugin, err))
	}
	s := nri{
		Enabled:            !sec.Disable && !slices.Contains(cfg.DisabledPlugins, containerdNRIPlugin),
		Socket:             sec.SocketPath,
		DisableConnections: sec.DisableConnections,
	}
	if d := sec.DefaultValidator; d != nil {
		s.Validator, s.Required, s.Tolerate = d.Enable, d.RequiredPlugins, d.TolerateMissingAnnotation
	}
	v.Result, v.Scope, v.Problems = judge(s, w, containerdDropIn)
	// containerd migrates a version 2 file's CRI keys as it starts,
	// which its loader alone does not: read them where that file has them.
	plugin := containerdCRIRuntime
	if rootVersion(path) < criRuntimeVersion {
		plugin = containerdCRIv2
	}
	var cdi containerdCDI
	if _, err := cfg.Decode(ctx, plugin, &cdi); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("decode %s's settings: %v; CDI is taken as off", plugin, err))
		return v
	}
	v.CDI = cdi.cdi(slices.Contains(cfg.DisabledPlugins, plugin))
	return v
}

// unreadable is the verdict for a configuration that could not be read.
func unreadable(v Verdict, err error) Verdict {
	v.Result = Unknown
	hint := "the runtime refuses it too: fix the file"
	if notFound(err) {
		hint = "mount the runtime's configuration directory into vgpud's container at the same path, read-only (docs/install.md, Node setup)"
	}
	v.Problems = []string{fmt.Sprintf("cannot read the %s configuration %s: %v; %s", v.Runtime, v.Config, err, hint)}
	return v
}
