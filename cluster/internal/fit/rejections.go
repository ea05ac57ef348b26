package fit

import (
	"fmt"

	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// rejections counts why GPUs were passed over, for one container.
type rejections struct {
	unhealthy, cordoned, selector, mode, exclusive, slot, mem, cores int
	largestFreeMem                                                   int64
	largestFreeCores                                                 int
	wantMem                                                          int64
	wantCores                                                        int
	profile                                                          int // MIG instances of another profile
	blocked                                                          int // possible MIG instances that would hold it, overlapping others
	full                                                             int // GPUs whose processes hold all their memory
	// heldAtLargest is what the GPU with the largest free memory holds
	// beyond its bookings (CommittedGPU.Held); heldShort counts the GPUs
	// refused for memory that would have held the container without it.
	heldAtLargest int64
	heldShort     int
}

func (r rejections) reason(c podmodel.ContainerRequest, fitting int, numaShort bool) *Reason {
	need := fmt.Sprintf("container %q needs %d GPU(s)", c.Name, c.GPUs)
	switch {
	case numaShort:
		return &Reason{Kind: "no single NUMA node", Text: fmt.Sprintf("%s on one NUMA node; %d fit but are spread across NUMA nodes", need, fitting)}
	case r.blocked > 0:
		if c.MIGProfile != "" {
			need = fmt.Sprintf("container %q needs a MIG %s instance", c.Name, c.MIGProfile)
		}
		return &Reason{Kind: "no room for a MIG instance", Text: fmt.Sprintf("%s; %d MIG instance(s) that would hold it cannot be made now: they overlap instances made or booked on their GPU", need, r.blocked)}
	case r.mem > 0:
		// Free is net of what the node reports its GPUs hold beyond their
		// bookings: say so, or the figure would not match the bookings.
		held, short := "", ""
		if r.heldAtLargest > 0 {
			held = fmt.Sprintf(" (%d MiB held beyond bookings, as the node reports)", r.heldAtLargest)
		} else if r.heldShort > 0 {
			short = fmt.Sprintf("; %d GPU(s) would hold it but for memory held beyond bookings, as the node reports", r.heldShort)
		}
		return &Reason{Kind: "insufficient gpumem", Text: fmt.Sprintf("%s with %d MiB; largest free %d MiB%s < %d%s", need, r.wantMem, max(r.largestFreeMem, 0), held, r.wantMem, short)}
	case r.cores > 0:
		return &Reason{Kind: "insufficient gpucores", Text: fmt.Sprintf("%s with %d cores; largest free %d < %d", need, r.wantCores, r.largestFreeCores, r.wantCores)}
	case r.slot > 0:
		return &Reason{Kind: "no free slot", Text: fmt.Sprintf("%s; %d GPU(s) already shared by their split limit", need, r.slot)}
	case r.exclusive > 0 && c.MIGProfile == "":
		return &Reason{Kind: "gpu in exclusive use", Text: fmt.Sprintf("%s; %d GPU(s) held exclusively or, for a 100-core or mutex request, not idle", need, r.exclusive)}
	case r.full > 0:
		return &Reason{Kind: "gpu full", Text: fmt.Sprintf("%s; %d GPU(s) full: their processes hold all their memory, as the node reports", need, r.full)}
	case c.MIGProfile != "" && (r.profile > 0 || r.exclusive > 0):
		return &Reason{Kind: "no free instance of the profile", Text: fmt.Sprintf("container %q needs a MIG %s instance; %d of that profile held, %d of other profiles", c.Name, c.MIGProfile, r.exclusive, r.profile)}
	case r.mode > 0:
		// Before the selectors: a GPU of the other mode had passed them,
		// and the mode is what the pod would change.
		also := ""
		if r.selector > 0 {
			also = fmt.Sprintf(", and %d excluded by use/nouse-gputype or -gpuuuid", r.selector)
		}
		return &Reason{Kind: "no gpu of the asked mode", Text: fmt.Sprintf("%s; %d GPU(s) serve another mode (MIG instances, one per container asking 1 GPU, only to pods with %s: mig; shared GPUs to the others)%s", need, r.mode, wellknown.AnnotationGPUMode, also)}
	case r.selector > 0:
		return &Reason{Kind: "no matching gpu", Text: fmt.Sprintf("%s; %d GPU(s) excluded by use/nouse-gputype or -gpuuuid", need, r.selector)}
	case r.cordoned > 0:
		return &Reason{Kind: "gpu cordoned", Text: fmt.Sprintf("%s; %d GPU(s) cordoned by an operator (%s)", need, r.cordoned, wellknown.AnnotationCordon)}
	case r.unhealthy > 0:
		return &Reason{Kind: "no healthy gpu", Text: fmt.Sprintf("%s; %d GPU(s) unhealthy", need, r.unhealthy)}
	default:
		return &Reason{Kind: "not enough gpus", Text: fmt.Sprintf("%s; the node has %d fitting", need, fitting)}
	}
}
