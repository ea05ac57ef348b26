package deviceplugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// progress is what this replica has allocated of one pod so far. It is
// kept in memory because the informer may not yet show the phase this
// replica wrote.
type progress struct {
	done  map[string]bool // container names
	final protocol.Phase  // allocated or failed, once written
}

// target is the container an Allocate call is for.
type target struct {
	pod        *corev1.Pod
	assignment protocol.Assignment
	container  protocol.ContainerAssignment
	spec       *corev1.Container
	last       bool // the pod's last GPU container: the pod is allocated after it
}

// resolveError is an Allocate that names no container. wait says whether
// the informer may yet bring the pod (none is bound here yet).
type resolveError struct {
	msg  string
	wait bool
	pod  *corev1.Pod // the pod to mark failed, if one was identified
	// dying is the one pod that is bound here and waiting but being
	// deleted, when no live pod is: see servesDying.
	dying *target
}

func (e *resolveError) Error() string { return e.msg }

// resolve finds the container kubelet is allocating ids for: the one pod
// on node whose phase is bound (per DESIGN, the leader lets only one be in
// flight per node), and its next GPU container in kubelet's order. It
// never guesses: two candidates that the device IDs cannot tell apart are
// an error, not a pick.
func resolve(node string, pods []*corev1.Pod, prog map[types.UID]*progress, ids []string) (target, error) {
	var cands, dying []target
	type skipped struct {
		pod *corev1.Pod
		why string
	}
	var others []skipped // formatted only for an error: Allocate's fast path allocates little
	for _, p := range pods {
		t, why := candidate(node, p, prog[p.UID])
		if why != "" {
			if t.pod != nil {
				dying = append(dying, t)
			}
			others = append(others, skipped{p, why})
			continue
		}
		cands = append(cands, t)
	}
	fail := func(wait bool, pod *corev1.Pod, format string, args ...any) *resolveError {
		msg := fmt.Sprintf("node %s: Allocate of %d device(s): ", node, len(ids)) + fmt.Sprintf(format, args...)
		return &resolveError{msg: msg, wait: wait, pod: pod}
	}
	switch len(cands) {
	case 0:
		considered := make([]string, len(others))
		for i, o := range others {
			considered[i] = fmt.Sprintf("%s/%s (%s)", o.pod.Namespace, o.pod.Name, o.why)
		}
		slices.Sort(considered)
		re := fail(true, nil, "no pod on this node is bound by vgpud and waiting for its GPUs; pods considered: %s", list(considered))
		if len(dying) == 1 {
			re.dying = &dying[0]
		}
		return target{}, re
	case 1:
	default:
		// Only the device IDs, chosen by GetPreferredAllocation from the
		// assignment, can tell in-flight pods apart.
		var match []target
		for _, t := range cands {
			if sameGPUs(t.container, ids) {
				match = append(match, t)
			}
		}
		if len(match) != 1 {
			names := make([]string, len(cands))
			for i, t := range cands {
				names[i] = t.pod.Namespace + "/" + t.pod.Name
			}
			slices.Sort(names)
			return target{}, fail(false, nil, "%d pods are bound and waiting, and the device IDs do not say which this is: %s", len(cands), strings.Join(names, ", "))
		}
		cands = match
	}
	// The device IDs are kubelet's truth about what it gave the pod: they
	// must be slices of GPUs assigned to this pod, or the env would name
	// GPUs kubelet never gave it. (Any of the pod's GPUs: kubelet hands an
	// app container the devices its init containers released.)
	if t := cands[0]; !podOwns(t.assignment, ids) {
		return target{}, fail(false, t.pod, "kubelet's devices %s are not slices of the GPUs vgpud assigned pod %s/%s; refusing rather than handing it GPUs kubelet did not give it",
			list(ids), t.pod.Namespace, t.pod.Name)
	}
	return cands[0], nil
}

// checkCount rejects an Allocate whose device count is not the number of
// GPUs the leader assigned the container.
func checkCount(node string, t target, ids []string) error {
	if n := len(t.container.GPUs); n != len(ids) {
		return &resolveError{pod: t.pod, msg: fmt.Sprintf("node %s: Allocate of %d device(s): pod %s/%s container %q was assigned %d GPU(s) by vgpud, but kubelet asks for %d",
			node, len(ids), t.pod.Namespace, t.pod.Name, t.container.Name, n, len(ids))}
	}
	return nil
}

// checkSlices holds the target container's share to protocol.CheckSlices
// against this node's GPUs.
func checkSlices(node string, t target, gpus []AdvertisedGPU) error {
	err := protocol.CheckSlices([]protocol.ContainerAssignment{t.container}, func(uuid string) (int64, bool) {
		i := slices.IndexFunc(gpus, func(g AdvertisedGPU) bool { return g.UUID == uuid })
		if i < 0 {
			return 0, false
		}
		return gpus[i].MemoryMiB, true
	})
	for _, s := range t.container.GPUs {
		// A MIG instance is handed whole, a shared GPU in slices: a
		// slice that says otherwise was not written for this node.
		if i := slices.IndexFunc(gpus, func(g AdvertisedGPU) bool { return g.UUID == s.UUID }); err == nil && i >= 0 && s.MIG != (gpus[i].Parent != "") {
			err = fmt.Errorf("container %q: GPU %s is %s here, but its slice says otherwise", t.container.Name, s.UUID, map[bool]string{true: "a MIG instance", false: "a shared GPU"}[gpus[i].Parent != ""])
		}
	}
	if err != nil {
		return &resolveError{pod: t.pod, msg: fmt.Sprintf("node %s: pod %s/%s: %v", node, t.pod.Namespace, t.pod.Name, err)}
	}
	return nil
}

// wantUUIDs are the GPUs assigned to the target container.
func (t target) wantUUIDs() []string {
	out := make([]string, len(t.container.GPUs))
	for i, g := range t.container.GPUs {
		out[i] = g.UUID
	}
	return out
}

// candidate returns the pod's next GPU container, or why the pod is not
// waiting for one. A terminating pod is never a candidate, but when it
// would otherwise be one its target comes back with the reason
// whyTerminating, for servesDying.
func candidate(node string, p *corev1.Pod, pr *progress) (target, string) {
	t, why := waiting(node, p, pr)
	if p.DeletionTimestamp != nil {
		if why != "" {
			t = target{}
		}
		return t, whyTerminating
	}
	return t, why
}

const whyTerminating = "terminating"

// waiting returns the pod's next GPU container, or why the pod is not
// bound here and waiting for one, whether or not it is being deleted.
func waiting(node string, p *corev1.Pod, pr *progress) (target, string) {
	switch {
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return target{}, strings.ToLower(string(p.Status.Phase))
	case p.Spec.NodeName != node:
		// Only kube-scheduler's Binding puts a pod on this node; an
		// assignment naming this node on a pod bound elsewhere is not ours.
		return target{}, "spec.nodeName is " + strconv.Quote(p.Spec.NodeName)
	case pr != nil && pr.final != "":
		return target{}, string(pr.final)
	}
	raw, ok := p.Annotations[wellknown.AnnotationPhase]
	if !ok {
		return target{}, "no " + wellknown.AnnotationPhase
	}
	if raw != string(protocol.PhaseBound) {
		return target{}, raw
	}
	a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
	if err != nil {
		return target{}, "bad assignment: " + err.Error()
	}
	if a.Node != node {
		return target{}, "assigned to node " + a.Node
	}
	order := gpuContainers(p, a)
	if len(order) != len(a.Containers) {
		return target{}, "assignment names a container the pod does not have"
	}
	for i, c := range order {
		if pr != nil && pr.done[c.Name] {
			continue
		}
		ca, _ := a.Container(c.Name)
		return target{pod: p, assignment: a, container: ca, spec: c, last: i == len(order)-1}, ""
	}
	return target{}, "every GPU container already allocated"
}

// gpuContainers lists the pod's containers that the assignment covers, in
// the order kubelet admits them: init containers first.
func gpuContainers(p *corev1.Pod, a protocol.Assignment) []*corev1.Container {
	var out []*corev1.Container
	for c := range podmodel.Containers(&p.Spec) {
		if _, ok := a.Container(c.Name); ok {
			out = append(out, c)
		}
	}
	return out
}

// sameGPUs reports whether the device IDs are slices of exactly the
// container's assigned GPUs.
func sameGPUs(c protocol.ContainerAssignment, ids []string) bool {
	if len(ids) != len(c.GPUs) {
		return false
	}
	for _, id := range ids {
		uuid, _ := splitID(id)
		if !slices.ContainsFunc(c.GPUs, func(g protocol.GPUSlice) bool { return g.UUID == uuid }) {
			return false
		}
	}
	return true
}

// podOwns reports whether every device ID is a slice of a GPU assigned to
// some container of the pod.
func podOwns(a protocol.Assignment, ids []string) bool {
	for _, id := range ids {
		uuid, _ := splitID(id)
		if !slices.ContainsFunc(a.Containers, func(c protocol.ContainerAssignment) bool {
			return slices.ContainsFunc(c.GPUs, func(g protocol.GPUSlice) bool { return g.UUID == uuid })
		}) {
			return false
		}
	}
	return true
}

// list renders at most 10 entries.
func list(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	if len(items) > 10 {
		return strings.Join(items[:10], ", ") + fmt.Sprintf(" and %d more", len(items)-10)
	}
	return strings.Join(items, ", ")
}
