package protocol

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// FeatureMIGOnDemand: some slice of an assignment is a MIG instance the
// node makes for the container (GPUSlice.Make); a node that ignored it
// would hand the container a name that is no device.
const FeatureMIGOnDemand = "mig-on-demand"

// OnDemandPrefix starts the name of every instance a node may make.
const OnDemandPrefix = "MIGX-"

// maxPossible bounds a GPU's possible instances: every profile at every
// placement the driver lists (18 on an H100 80GB).
const maxPossible = 64

// OnDemandID names the instance of profile at start on gpu that a node
// may make: vgpud's name, the same on every reading, never a device's.
func OnDemandID(gpu, profile string, start int) string {
	return OnDemandPrefix + strings.TrimPrefix(gpu, "GPU-") + "-" + profile + "@" + strconv.Itoa(start)
}

// IsOnDemandID says whether uuid is an OnDemandID.
func IsOnDemandID(uuid string) bool { return strings.HasPrefix(uuid, OnDemandPrefix) }

// validatePossible checks g's possible instances (the i-th MIG GPU);
// their names are unique across the node (seen, which it extends).
// Possible instances may overlap each other, being alternatives, but
// not an instance in Instances; made ones, which exist, overlap nothing
// else made.
func validatePossible(i int, g MIGGPU, seen map[string]bool) error {
	if len(g.Possible) > maxPossible {
		return fmt.Errorf("mig[%d] %s: %d possible instances, more than %d", i, g.UUID, len(g.Possible), maxPossible)
	}
	for j, in := range g.Possible {
		where := fmt.Sprintf("mig[%d].possible[%d] %s", i, j, in.UUID)
		switch err := checkOnDemand(where, g, in, seen); {
		case err != nil:
			return err
		case in.Made != "" && (!strings.HasPrefix(in.Made, "MIG-") || seen[in.Made]):
			return fmt.Errorf("%s: made %q must be a MIG device's UUID (MIG-...), once", where, in.Made)
		}
		for _, o := range g.Instances {
			if in.placement().Overlaps(o.placement()) {
				return fmt.Errorf("%s: placement %d+%d overlaps instance %s, which the node did not make", where, in.Start, in.Size, o.UUID)
			}
		}
		if in.Made != "" {
			for _, o := range g.Possible[:j] {
				if o.Made != "" && in.placement().Overlaps(o.placement()) {
					return fmt.Errorf("%s: made at %d+%d, overlapping %s, also made", where, in.Start, in.Size, o.UUID)
				}
			}
			seen[in.Made] = true
		}
		seen[in.UUID] = true
	}
	return validateKept(i, g, seen)
}

// checkOnDemand is what a possible and a kept instance of g both are:
// a profile, the name OnDemandID gives it, unique across the node (seen),
// memory and SMs within its GPU's, a placement within the GPU's slices.
func checkOnDemand(where string, g MIGGPU, in MIGInstance, seen map[string]bool) error {
	switch {
	case in.Profile == "" || len(in.Profile) > maxProfileLen:
		return fmt.Errorf("%s: profile %q must be 1..%d bytes", where, in.Profile, maxProfileLen)
	case in.UUID != OnDemandID(g.UUID, in.Profile, in.Start) || seen[in.UUID]:
		return fmt.Errorf("%s: want the name %s, once", where, OnDemandID(g.UUID, in.Profile, in.Start))
	case in.MemoryMiB <= 0 || in.MemoryMiB > g.MemoryMiB:
		return fmt.Errorf("%s: memoryMiB %d must be within 1..%d, its GPU's", where, in.MemoryMiB, g.MemoryMiB)
	case in.SMs <= 0 || in.SMs > g.SMs:
		return fmt.Errorf("%s: sms %d must be within 1..%d, its GPU's", where, in.SMs, g.SMs)
	case in.Start < 0 || in.Size <= 0 || in.Start+in.Size > maxMemSlices:
		return fmt.Errorf("%s: placement %d+%d must lie within 0..%d", where, in.Start, in.Size, maxMemSlices)
	}
	return nil
}

// validateKept checks g's kept instances (the i-th MIG GPU): named as a
// possible instance, each made, none overlapping another instance.
func validateKept(i int, g MIGGPU, seen map[string]bool) error {
	if len(g.Kept) > maxMIGInstances {
		return fmt.Errorf("mig[%d] %s: %d kept instances, more than %d", i, g.UUID, len(g.Kept), maxMIGInstances)
	}
	for j, in := range g.Kept {
		where := fmt.Sprintf("mig[%d].kept[%d] %s", i, j, in.UUID)
		switch err := checkOnDemand(where, g, in, seen); {
		case err != nil:
			return err
		case !strings.HasPrefix(in.Made, "MIG-") || seen[in.Made]:
			return fmt.Errorf("%s: made %q must be a MIG device's UUID (MIG-...), once", where, in.Made)
		case len(in.Pod) > 64 || strings.IndexFunc(in.Pod, unicode.IsControl) >= 0:
			return fmt.Errorf("%s: pod %q must be the UID of the pod it was made for", where, in.Pod)
		}
		for _, o := range append(slices.Clone(g.Instances), g.Kept[:j]...) {
			if in.placement().Overlaps(o.placement()) {
				return fmt.Errorf("%s: placement %d+%d overlaps %s", where, in.Start, in.Size, o.UUID)
			}
		}
		for _, o := range g.Possible {
			if o.Made != "" && in.placement().Overlaps(o.placement()) {
				return fmt.Errorf("%s: placement %d+%d overlaps %s, made", where, in.Start, in.Size, o.UUID)
			}
		}
		seen[in.UUID], seen[in.Made] = true, true
	}
	return nil
}
