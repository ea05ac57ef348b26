package migmaker

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/mig"
)

// NVML is the Driver over an NVML library.
type NVML struct{ Lib nvml.Interface }

func (d NVML) Make(parent string, profile int, at mig.Span) (gpu.Made, error) {
	return gpu.MakeMIG(d.Lib, parent, profile, at)
}

func (d NVML) Destroy(parent string, profile int, at mig.Span, m gpu.Made, begun bool) (bool, error) {
	return gpu.DestroyMIG(d.Lib, parent, profile, at, m, begun)
}

func (d NVML) InUse(parent string, m gpu.Made) error {
	return gpu.MIGInUse(d.Lib, parent, m)
}

func (d NVML) Find(parent string, profile int, at mig.Span) (gpu.Made, bool, error) {
	return gpu.FindMIG(d.Lib, parent, profile, at)
}

func (d NVML) DestroyHalfMade(parent string, gi int) error {
	return gpu.DestroyHalfMade(d.Lib, parent, gi)
}
