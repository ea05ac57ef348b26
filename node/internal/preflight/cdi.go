package preflight

import (
	"os"
	"slices"

	"github.com/pelletier/go-toml/v2"
)

// CDI is what the runtime's configuration says of the Container Device
// Interface: whether it injects the CDI devices a container's request or
// an NRI plugin's adjustment names, and from which spec directories.
type CDI struct {
	Enabled  bool     `json:"enabled"`
	SpecDirs []string `json:"specDirs,omitempty"`
}

// defaultCDISpecDirs are both runtimes' defaults, and CDI's own.
func defaultCDISpecDirs() []string { return []string{"/etc/cdi", "/var/run/cdi"} }

// containerdCRIRuntime is containerd 2.x's CRI runtime plugin, which
// holds enable_cdi and cdi_spec_dirs (containerd's loader moves older
// configuration versions' keys there).
const containerdCRIRuntime = "io.containerd.cri.v1.runtime"

// criRuntimeVersion is the configuration version that moved them there.
const criRuntimeVersion = 3

// containerdCRIv2 is where an older file (containerd 1.x) has them.
const containerdCRIv2 = "io.containerd.grpc.v1.cri"

// containerdCDI is the part of the CRI runtime plugin's settings that
// says whether containerd injects CDI devices; pointers tell a key left
// out (containerd's default: on, CDI's directories) from one set.
type containerdCDI struct {
	Enable   *bool     `toml:"enable_cdi"`
	SpecDirs *[]string `toml:"cdi_spec_dirs"`
}

func (c containerdCDI) cdi(criDisabled bool) CDI {
	out := CDI{Enabled: !criDisabled, SpecDirs: defaultCDISpecDirs()}
	if c.Enable != nil {
		out.Enabled = out.Enabled && *c.Enable
	}
	if c.SpecDirs != nil {
		out.SpecDirs = slices.Clone(*c.SpecDirs)
	}
	if len(out.SpecDirs) == 0 {
		out.Enabled = false
	}
	if !out.Enabled {
		out.SpecDirs = nil
	}
	return out
}

// rootVersion is the configuration version of containerd's main file,
// the one containerd migrates every import to: 1 where it says none, 0
// where it cannot be read (LoadConfig has said why).
func rootVersion(path string) int {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var v struct {
		Version int `toml:"version"`
	}
	if err := toml.Unmarshal(raw, &v); err != nil {
		return 0
	}
	return max(v.Version, 1)
}
