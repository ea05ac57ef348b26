package protocol

// Bounds past which a quantity is a typo (or an attack), not a request.
// Decoders enforce them too, so no sum of slices can overflow.
const (
	MaxGPUsPerContainer = 64
	MaxMemoryMiB        = 16 << 20 // 16 TiB per GPU
	MaxPriority         = 100
	// MaxPercent bounds a memory percentage and a share of a GPU's cores.
	MaxPercent = 100
	// MaxSplit is the most virtual devices per GPU; the node role's
	// --split bound.
	MaxSplit = 1000
	// MaxScaledCores is a GPU's cores (100 percent) at the largest
	// --core-scaling (100).
	MaxScaledCores = 100 * 100
	// MaxGPUsPerNode bounds an inventory's MIG GPUs.
	MaxGPUsPerNode = 64
	// maxSMs bounds a GPU's multiprocessors (an H100 has 132).
	maxSMs = 1024
	// maxMemSlices bounds a MIG placement: NVIDIA's GPUs have 8 memory
	// slices.
	maxMemSlices = 16
)
