package harness

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// GPUUse is what pods' assignments hold of one GPU.
type GPUUse struct {
	MemMiB int64
	Cores  int
	Slices int
}

// Assigned is a live pod with the assignment it carries.
type Assigned struct {
	Pod        *corev1.Pod
	Assignment protocol.Assignment
}

// AssignedUse reads the vgpud.io/assignment of every pod that has not
// terminated and sums them per GPU UUID: what the API says the GPUs hold,
// for the suites to hold against inventories and the leader's books. An
// unreadable assignment is an error naming the pod, and counts as
// nothing.
func AssignedUse(pods []corev1.Pod) (map[string]*GPUUse, []Assigned, []error) {
	used := map[string]*GPUUse{}
	var live []Assigned
	var errs []error
	for i := range pods {
		p := &pods[i]
		raw, ok := p.Annotations[wellknown.AnnotationAssignment]
		if !ok || podmodel.Terminated(p) {
			continue
		}
		a, err := protocol.DecodeAssignment(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		live = append(live, Assigned{Pod: p, Assignment: a})
		for _, c := range a.Containers {
			for _, s := range c.GPUs {
				u := used[s.UUID]
				if u == nil {
					u = &GPUUse{}
					used[s.UUID] = u
				}
				u.MemMiB += s.MemoryMiB
				u.Cores += s.Cores
				u.Slices++
			}
		}
	}
	return used, live, errs
}
