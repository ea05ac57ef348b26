package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// keptInstance is an instance the mock made after its start, as KeepMIG
// writes it down: its GPU, profiles and placement.
type keptInstance struct {
	GPU       string  `json:"gpu"`
	Profile   uint32  `json:"profile"`
	Start     uint32  `json:"start"`
	Size      uint32  `json:"size"`
	CIProfile *uint32 `json:"ciProfile,omitempty"` // nil: no compute instance
}

// KeepMIG has the mock's MIG instances outlive its process, as a
// driver's outlive vgpud's: it makes again those path lists (made by an
// earlier process, with the same UUIDs, which depend on the placement
// only), and writes path after each instance made or destroyed from now
// on. The instances a fake spec lists are made at every start and are
// not written.
func (m *Mock) KeepMIG(path string) error {
	fixed := map[*mockGI]bool{}
	for _, g := range m.migs {
		g.mu.Lock()
		for _, gi := range g.gis {
			fixed[gi] = true
		}
		g.mu.Unlock()
	}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("mock MIG state: %w", err)
	default:
		var kept []keptInstance
		if err := json.Unmarshal(raw, &kept); err != nil {
			return fmt.Errorf("mock MIG state %s: %w", path, err)
		}
		for _, k := range kept {
			m.remake(k) // what no longer fits, a changed spec took
		}
	}
	save := func() {
		var kept []keptInstance
		for _, g := range m.migs {
			g.mu.Lock()
			for _, gi := range g.gis {
				if fixed[gi] {
					continue
				}
				k := keptInstance{GPU: g.uuid, Profile: gi.profile.Id, Start: gi.info.Placement.Start, Size: gi.info.Placement.Size}
				if gi.ci != nil {
					k.CIProfile = &gi.ci.profile.Id
				}
				kept = append(kept, k)
			}
			g.mu.Unlock()
		}
		raw, err := json.Marshal(kept)
		if err != nil {
			return
		}
		// A temporary file of its own: two processes (a node role pod
		// and its successor) may write at once.
		tmp, err := os.CreateTemp(filepath.Dir(path), ".mock-mig-*")
		if err != nil {
			return
		}
		_, werr := tmp.Write(raw)
		if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
			_ = os.Remove(tmp.Name())
		}
	}
	for _, g := range m.migs {
		g.mu.Lock()
		g.changed = save
		g.mu.Unlock()
	}
	save()
	return nil
}

// remake makes k again through the mock's own NVML calls.
func (m *Mock) remake(k keptInstance) {
	i := slices.IndexFunc(m.migs, func(g *migGPU) bool { return g.uuid == k.GPU })
	if i < 0 {
		return
	}
	g := m.migs[i]
	p, ok := g.profiles.GpuInstanceProfiles[int(k.Profile)]
	if !ok {
		return
	}
	gi, ret := g.parent.CreateGpuInstanceWithPlacement(&p, &nvml.GpuInstancePlacement{Start: k.Start, Size: k.Size})
	if ret != nvml.SUCCESS || k.CIProfile == nil {
		return
	}
	if cp, ok := g.profiles.ComputeInstanceProfiles[int(k.Profile)][int(*k.CIProfile)]; ok {
		gi.CreateComputeInstance(&cp)
	}
}
