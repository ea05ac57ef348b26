// Package slimpod is what the leader keeps of each pod: a small record read
// once from the API object, instead of the object. With tens of thousands
// of pods, a trimmed *corev1.Pod still costs kilobytes each (the Pod
// struct alone is over 1 KiB); the books, quota and bind need only
// names, vgpud's annotations, node, scheduler, phase and what each
// container asks of vgpud.
package slimpod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Pod is the leader's record of a pod. Its Meta holds the name,
// namespace, UID, resourceVersion, deletion timestamp and the other
// annotations the leader reads (selectors and policies); that also makes
// it an object client-go's stores can key. The small fields come last so
// that a record fits 256 bytes (BenchmarkBooksMemory).
type Pod struct {
	Meta
	// Assignment and AssignmentPhase are the vgpud.io/assignment and
	// vgpud.io/phase annotations, as fields rather than in Annotations:
	// every booked pod has them, and a map per pod costs more than both.
	// HasAssignment says whether the first is there at all, even empty.
	Assignment      string
	AssignmentPhase string
	// HAMiAllocated and HAMiNode are HAMi's record of what its scheduler
	// gave the pod (hamirecord.AnnotationHAMiAllocated), kept only on pods
	// that have no assignment of vgpud's: the books count them so that
	// nothing is placed on top of a pod HAMi placed. A value longer than
	// hamirecord.MaxHAMiBytes is kept cut just past it, still refused.
	HAMiAllocated string
	HAMiNode      string
	NodeName      string
	SchedulerName string
	// Nominated is status.nominatedNodeName: kube-scheduler preempted
	// for the pod there.
	Nominated string
	Phase     corev1.PodPhase
	// Containers are the pod's containers in the order kubelet admits them
	// (init containers first), each with what it asks of vgpud. When
	// Invalid is set they carry only names and kinds.
	Containers []podmodel.ContainerRequest
	// Invalid says why the containers' vGPU resources cannot be read.
	Invalid error
	// Priority is spec.priority, what admission resolved from the
	// pod's priority class (0 without one): preemption weighs it.
	Priority      int32
	HasAssignment bool
	// PreemptNever: spec.preemptionPolicy Never, the pod waits rather
	// than evict anyone.
	PreemptNever bool
	// Wants: some container names a vGPU resource, even unreadably.
	Wants bool
}

// Of reads p into a record; names are the resource names vgpud serves.
func Of(p *corev1.Pod, names wellknown.ResourceNames) *Pod {
	raw, has := p.Annotations[wellknown.AnnotationAssignment]
	r := &Pod{
		Meta: Meta{
			Name:              p.Name,
			Namespace:         p.Namespace,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp,
			Annotations:       leaderAnnotations(p.Annotations),
		},
		Assignment:      raw,
		HasAssignment:   has,
		AssignmentPhase: p.Annotations[wellknown.AnnotationPhase],
		NodeName:        p.Spec.NodeName,
		SchedulerName:   p.Spec.SchedulerName,
		Priority:        ptr.Deref(p.Spec.Priority, 0),
		PreemptNever:    ptr.Deref(p.Spec.PreemptionPolicy, corev1.PreemptLowerPriority) == corev1.PreemptNever,
		Nominated:       p.Status.NominatedNodeName,
		Phase:           p.Status.Phase,
		Wants:           podmodel.Wants(p, names),
	}
	if !has {
		if v := p.Annotations[hamirecord.AnnotationHAMiAllocated]; v != "" {
			if len(v) > hamirecord.MaxHAMiBytes {
				v = strings.Clone(v[:hamirecord.MaxHAMiBytes+1])
			}
			r.HAMiAllocated = v
			// A node name is at most 253 bytes; a longer one is refused
			// for naming no node, so a cut is enough.
			r.HAMiNode = p.Annotations[hamirecord.AnnotationHAMiNode]
			if len(r.HAMiNode) > 254 {
				r.HAMiNode = strings.Clone(r.HAMiNode[:254])
			}
		}
	}
	cs, err := podmodel.Requests(p, names)
	if err != nil {
		r.Invalid = err
		cs = make([]podmodel.ContainerRequest, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
		for c, k := range podmodel.Containers(&p.Spec) {
			cs = append(cs, podmodel.ContainerRequest{Name: c.Name, Kind: k})
		}
	}
	r.Containers = cs
	return r
}

// leaderAnnotations keeps the selector and policy annotations the leader
// reads (extender's requestFor), and nothing else: a tenant may fill
// annotations up to the apiserver's 256 KiB on every pod, and the record
// is kept for each. A value past podmodel.MaxSelectorBytes is kept cut
// just past the bound, so it is still refused for its length.
func leaderAnnotations(a map[string]string) map[string]string {
	var keep map[string]string
	for _, k := range leaderKeys() {
		v, ok := a[k]
		if !ok {
			continue
		}
		if len(v) > podmodel.MaxSelectorBytes {
			v = v[:podmodel.MaxSelectorBytes+1]
		}
		if keep == nil {
			keep = make(map[string]string, 2)
		}
		keep[k] = v
	}
	return keep
}

// leaderKeys are the pod annotations the leader reads; an array, so each
// pod event allocates no list.
func leaderKeys() [11]string {
	sel := podmodel.SelectorKeys()
	return [11]string{sel[0], sel[1], sel[2], sel[3], wellknown.AnnotationNUMABind,
		wellknown.AnnotationNodePolicy, wellknown.AnnotationGPUPolicy, wellknown.AnnotationNodePolicyHAMi, wellknown.AnnotationGPUPolicyHAMi,
		wellknown.AnnotationGPUMode, wellknown.AnnotationGPUModeHAMi}
}

// Terminated reports whether the pod has finished for good
// (podmodel.Terminated).
func (p *Pod) Terminated() bool { return podmodel.TerminatedPhase(p.Phase) }

// Kinds maps each container to its kind (podmodel.Kinds).
func (p *Pod) Kinds() map[string]podmodel.ContainerKind {
	out := make(map[string]podmodel.ContainerKind, len(p.Containers))
	for _, c := range p.Containers {
		out[c.Name] = c.Kind
	}
	return out
}

// Usage is what the pod counts against quota (podmodel.PodUsage), or an
// error if its requests cannot be read.
func (p *Pod) Usage() (podmodel.Usage, error) {
	if p.Invalid != nil {
		return podmodel.Usage{}, p.Invalid
	}
	return podmodel.Requested(p.Containers, 0, p.holdsAlone()), nil
}

// holdsAlone says whether the pod holds its GPUs by the mutex policy:
// once placed, as its assignment says (the tenant's annotation may have
// changed since); a pod HAMi placed never (HAMi books it shared); before
// placement, as its policy asks.
func (p *Pod) holdsAlone() bool {
	switch {
	case p.HasAssignment:
		a, err := protocol.DecodeAssignment(p.Assignment)
		return err == nil && a.HoldsAlone()
	case p.HAMiAllocated != "":
		return false
	}
	policy, _ := podmodel.GPUPolicyOf(p.Annotations, "")
	return policy.Mutex
}

// Ref is a stub API object naming the pod, for Events.
func (p *Pod) Ref() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}
}

// GetObjectKind is runtime.Object's: a record has no kind of its own.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is runtime.Object's.
func (p *Pod) DeepCopyObject() runtime.Object {
	c := *p
	p.Meta.deepCopyInto(&c.Meta)
	c.Containers = append([]podmodel.ContainerRequest(nil), p.Containers...)
	return &c
}
