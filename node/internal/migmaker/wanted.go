package migmaker

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/mig"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Catalog is every instance the node may make, by protocol.OnDemandID:
// each profile allow lets through, of each GPU in profiles, at each
// placement its driver lists.
func Catalog(profiles map[string][]gpu.MIGProfile, allow func(profile string) bool) map[string]Slot {
	out := map[string]Slot{}
	for parent, ps := range profiles {
		for _, p := range ps {
			if !allow(p.Name) {
				continue
			}
			for _, at := range p.Placements {
				out[protocol.OnDemandID(parent, p.Name, at.Start)] = Slot{Parent: parent, Profile: p.ID, Name: p.Name, At: at, MemoryMiB: p.MemoryMiB, SMs: p.SMs}
			}
		}
	}
	return out
}

// Possible is what the inventory lists as parent's possible instances:
// each slot of it in catalog that no instance the node did not make
// overlaps (taken: the placements of those), with the UUIDs of those it
// made (made, by name), in profile then placement order.
func Possible(parent string, catalog map[string]Slot, taken []mig.Span, made map[string]string) []protocol.MIGInstance {
	var out []protocol.MIGInstance
	for id, s := range catalog {
		if s.Parent != parent || slices.ContainsFunc(taken, s.At.Overlaps) {
			continue
		}
		out = append(out, protocol.MIGInstance{UUID: id, Profile: s.Name, MemoryMiB: s.MemoryMiB, SMs: s.SMs, Start: s.At.Start, Size: s.At.Size, Made: made[id]})
	}
	slices.SortFunc(out, func(a, b protocol.MIGInstance) int {
		return cmp.Or(cmp.Compare(catalog[a.UUID].Profile, catalog[b.UUID].Profile), cmp.Compare(a.Start, b.Start))
	})
	return out
}

// Wanted is what node's pods ask it to make: the slot of each slice to
// make of each pod bound to node that has not ended, by name; held is
// every such name with its pod (namespace/name/uid), known to the
// catalog or not: the maker destroys no instance a pod holds. unknown
// are names the catalog lacks (the leader booked on an inventory since
// changed, or the node's settings changed), as pod: name. Two pods
// naming one instance (a leader's books cannot do that) hold it by the
// first in name order.
func Wanted(pods []*corev1.Pod, node string, catalog map[string]Slot) (want map[string]Demand, held map[string]string, unknown []string) {
	want, held = map[string]Demand{}, map[string]string{}
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range pods {
		raw, ok := p.Annotations[wellknown.AnnotationAssignment]
		if !ok || p.Spec.NodeName != node || podmodel.Terminated(p) {
			continue
		}
		a, err := protocol.DecodeAssignment(raw)
		if err != nil || a.Node != node || !a.Makes() {
			continue
		}
		key := PodKey(p)
		for _, c := range a.Containers {
			for _, s := range c.GPUs {
				if _, taken := held[s.UUID]; !s.Make || taken {
					continue
				}
				held[s.UUID] = key
				slot, ok := catalog[s.UUID]
				if !ok {
					unknown = append(unknown, key+": "+s.UUID)
					continue
				}
				want[s.UUID] = Demand{Slot: slot, Pod: key}
			}
		}
	}
	return want, held, unknown
}

// PodKey names a pod as the record does: namespace/name/uid.
func PodKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name + "/" + string(p.UID) }
