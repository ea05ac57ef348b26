// Package nrihook is the node role's NRI plugin: the container runtime
// calls it as it creates each container, naming the pod and the
// container, and it sets the container's GPU slice from that pod's own
// assignment, or takes every GPU away from a container vgpud granted
// none. Nothing is guessed: the runtime says which pod this is.
package nrihook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Action is what the hook does to one container.
type Action int

const (
	// Void takes every GPU away: the container was granted none.
	Void Action = iota
	// Grant sets the container's slice from its pod's assignment.
	Grant
	// Exempt leaves the container as the pod and image made it.
	Exempt
	// Refuse fails the container's creation; kubelet shows why and retries.
	Refuse
	// Keep leaves a container of a pod HAMi placed with what HAMi's
	// device plugin gave it, held to the GPUs HAMi's record names: what
	// its env, envFrom, image or CDI names beyond them refuses it.
	Keep
)

func (v Action) String() string {
	return [...]string{"void", "grant", "exempt", "refuse", "keep"}[v]
}

// Decision is the verdict on one container, with its slice (Grant) or
// the reason (Exempt, Refuse).
type Decision struct {
	Action Action
	Slice  grant.Slice
	// Assigned is the container's part of the pod's assignment (Grant):
	// what the node holds its processes to.
	Assigned protocol.ContainerAssignment
	Reason   string
	// Devices are the GPUs a Keep container may name: every GPU of its
	// pod's HAMi record (which lists containers by position, not name).
	Devices []string
	// Claimed, for a Grant of DRA claims, are the CDI devices kubelet
	// gave the container and the device nodes they bring; nil for a
	// grant from an assignment.
	Claimed *cdiGrant
}

// ClaimGrant is one device the node prepared for a DRA claim, as a
// container of a pod it was prepared for gets it.
type ClaimGrant struct {
	CDI   string // the CDI device's qualified name
	Slice protocol.GPUSlice
	// Share: a share of a GPU others share too, which the node holds
	// the containers it serves to together (not a device held whole).
	Share bool
	// Claim is the claim's "namespace/name", to say whose share it is.
	Claim string
	// Nodes are the device nodes the CDI device brings.
	Nodes []string
}

// NamedContainer is the container the runtime is creating, as the runtime
// names it, and the pod the node's informer holds under that name.
type NamedContainer struct {
	Namespace, Pod, UID, Name string
	// Static is a pod kubelet runs from a file: vgpud never binds one.
	Static bool
	// Known is the informer's pod of that namespace and name, if any; it
	// is this container's pod only when its UID matches.
	Known *corev1.Pod
	// Claimed are the grants behind the DRA claims' CDI devices kubelet
	// gave the container (Ruleset.Claims resolved them from the node's
	// prepare record); ClaimErr says why one was refused.
	Claimed  []ClaimGrant
	ClaimErr error
}

// Ruleset are the node's settings the decision reads.
type Ruleset struct {
	Node      string
	Resources wellknown.ResourceNames
	Slice     grant.Shape
	// Agent says whether a pod's containers keep every GPU their image
	// or pod names: a GPU agent's (DCGM exporter, vgpud's own), by its
	// namespace and ServiceAccount; an error when it cannot tell yet.
	// Nil exempts none.
	Agent func(namespace, serviceAccount string) (bool, error)
	// AgentsSynced says whether Agent can tell yet; nil: always.
	AgentsSynced func() bool
	// Self is the hook's own pod, namespace/name: its containers are
	// never judged at a reconnection (one created while the hook was
	// down is the hook's own).
	Self string
	// Early says whether a namespace's containers start, with no GPU,
	// when the informer has not seen their pod (the pod network's, after
	// a reboot); its pods the informer has seen get no exemption.
	Early func(namespace string) bool
	// MIGParent is the GPU of a MIG device of this node, by its UUID; ""
	// for one the node does not know. Nil knows none.
	MIGParent func(uuid string) string
	// CDI names GPUs (UUIDs) as the node's NVIDIA CDI devices, with the
	// device nodes they bring: none where the node hands GPUs out by
	// env alone; an error where a grant cannot be handed out so. Nil:
	// env alone.
	CDI func(gpus []string) (names, nodes []string, err error)
	// CDIKnown says whether CDI can tell which devices a grant brings
	// yet (the runtime read, the GPUs discovered); nil: always.
	CDIKnown func() bool
	// Claims resolves a CDI device kubelet gave a container of the pod
	// with that UID: the grant the node prepared behind it, where the
	// name is a DRA claim's (ours); an error for one the node did not
	// prepare for that pod. Nil resolves none, and a claim's device is
	// then a GPU outside the books.
	Claims func(ctx context.Context, cdiName, podUID, container string) (g ClaimGrant, ours bool, err error)
}

// Decide is the verdict on c. It reads only what vgpud wrote (the
// assignment, fenced by admission) and what the runtime says (the pod's
// name and UID); the pod's env and the image never widen a slice.
func Decide(c NamedContainer, r Ruleset) Decision {
	pod := c.Known
	if pod != nil && !samePod(pod, c.UID, c.Static) {
		pod = nil
	}
	id := c.Namespace + "/" + c.Pod
	if pod == nil {
		// An agent is known by its pod's ServiceAccount: one vgpud has not
		// seen waits like any other.
		if c.Static || (r.Early != nil && r.Early(c.Namespace)) {
			return Decision{Action: Void}
		}
		return Decision{Action: Refuse, Reason: fmt.Sprintf("vgpud on node %s has not seen pod %s (uid %s) yet, so it cannot tell which GPUs container %q may have; kubelet retries the container", r.Node, id, c.UID, c.Name)}
	}
	spec := containerSpec(pod, c.Name)
	asks := spec != nil && len(podmodel.VGPUNames(spec, r.Resources)) > 0
	if c.ClaimErr != nil {
		return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q of pod %s: %v", c.Name, id, c.ClaimErr)}
	}
	if len(c.Claimed) > 0 {
		if _, assigned := pod.Annotations[wellknown.AnnotationAssignment]; assigned || asks {
			return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q of pod %s has DRA claims and vGPU resources both: a node serving claims takes claims only", c.Name, id)}
		}
		if why := claimsRefused(c); why != "" {
			return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q of pod %s: %s", c.Name, id, why)}
		}
		return claimed(c, spec, r)
	}
	if raw, ok := pod.Annotations[wellknown.AnnotationAssignment]; ok {
		a, err := protocol.DecodeAssignment(raw)
		switch {
		case err != nil:
			if asks {
				return Decision{Action: Refuse, Reason: fmt.Sprintf("pod %s: %v", id, err)}
			}
		case a.Node != r.Node || pod.Spec.NodeName != r.Node:
			if asks {
				return Decision{Action: Refuse, Reason: fmt.Sprintf("pod %s is assigned GPUs on node %q and bound to %q, not this node %s", id, a.Node, pod.Spec.NodeName, r.Node)}
			}
		default:
			if ca, ok := a.Container(c.Name); ok && spec != nil {
				return Decision{Action: Grant, Slice: grant.For(ca, c.UID, grant.Priority(spec, r.Resources), r.Slice), Assigned: ca}
			}
		}
	}
	if r.Agent != nil && !c.Static {
		switch agent, err := r.Agent(pod.Namespace, pod.Spec.ServiceAccountName); {
		case err != nil && spec != nil && privileged(spec):
			// Exempt below whatever the namespace says.
		case err != nil:
			return Decision{Action: Refuse, Reason: fmt.Sprintf("vgpud on node %s cannot tell yet whether pod %s is a GPU agent (ServiceAccount %s): %v; kubelet retries the container", r.Node, id, pod.Spec.ServiceAccountName, err)}
		case agent:
			return Decision{Action: Exempt, Reason: "GPU agent: ServiceAccount " + pod.Spec.ServiceAccountName + " in namespace " + pod.Namespace + ", labelled " + wellknown.LabelGPUAgents + "=true"}
		}
	}
	switch {
	case PlacedByHAMi(pod, r.Node) && spec != nil && getsDevices(spec):
		// Its GPUs are what HAMi's device plugin gave it, which kubelet
		// keeps for its containers' restarts; vgpud books them (README
		// "Coming from HAMi"), and holds it to them. Only a container
		// that asks the GPU resource got any: the pod's others, and its
		// ephemeral ones, are judged like any other pod's.
		a, err := hamirecord.DecodeHAMiAllocation(pod.Annotations[hamirecord.AnnotationHAMiAllocated], r.Node)
		if err != nil {
			return Decision{Action: Refuse, Reason: fmt.Sprintf("pod %s was placed by HAMi, but its record cannot be read, so vgpud cannot tell which GPUs container %q may have: %v", id, c.Name, err)}
		}
		var uuids []string
		for _, ca := range a.Containers {
			for _, g := range ca.GPUs {
				if !slices.Contains(uuids, g.UUID) {
					uuids = append(uuids, g.UUID)
				}
			}
		}
		return Decision{Action: Keep, Devices: uuids, Reason: "placed on this node by HAMi (" + hamirecord.AnnotationHAMiAllocated + ")"}
	case spec != nil && privileged(spec):
		// A privileged container reaches every device node anyway; the
		// NVIDIA container toolkit gives it every GPU too.
		return Decision{Action: Exempt, Reason: "privileged"}
	case asks:
		return Decision{Action: Refuse, Reason: fmt.Sprintf("container %q of pod %s asks for %v but vgpud assigned it no GPUs: only pods that vgpud's scheduler (schedulerName vgpud-scheduler) binds get a GPU share; create the pod without spec.nodeName and without opting out of vgpud's webhook",
			c.Name, id, podmodel.VGPUNames(spec, r.Resources))}
	}
	return Decision{Action: Void}
}

// PlacedByHAMi says whether HAMi's scheduler placed pod on node and
// recorded its devices: only HAMi's scheduler can write that record
// (policy vgpud-hami-records), and a pod vgpud assigned is vgpud's.
func PlacedByHAMi(pod *corev1.Pod, node string) bool {
	if _, ours := pod.Annotations[wellknown.AnnotationAssignment]; ours {
		return false
	}
	hamiNode := pod.Annotations[hamirecord.AnnotationHAMiNode]
	return pod.Annotations[hamirecord.AnnotationHAMiAllocated] != "" && pod.Spec.NodeName == node && (hamiNode == "" || hamiNode == node)
}

// getsDevices says whether kubelet asks some device plugin for devices
// for c: it asks a non-zero count of an extended resource. HAMi's
// resource names need not be vgpud's (vgpud renamed to run beside it).
func getsDevices(c *corev1.Container) bool {
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name, q := range list {
			// Extended resources are the domain-prefixed names outside
			// kubernetes.io; the native ones (cpu, memory, hugepages-*)
			// have no domain.
			if n := string(name); strings.Contains(n, "/") && !strings.HasPrefix(n, "kubernetes.io/") && !q.IsZero() {
				return true
			}
		}
	}
	return false
}

// samePod reports whether pod is the one with the runtime's uid. A
// static pod's mirror in the API has its own UID and names kubelet's.
func samePod(pod *corev1.Pod, uid string, static bool) bool {
	return string(pod.UID) == uid || (static && uid != "" && pod.Annotations[corev1.MirrorPodAnnotationKey] == uid)
}

// containerSpec is the pod's container of that name; nil for one the
// spec does not list (an ephemeral debug container).
func containerSpec(pod *corev1.Pod, name string) *corev1.Container {
	for c := range podmodel.Containers(&pod.Spec) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// claimsRefused says why c's claims cannot be its slice, "" where they
// can. Its env holds one SM limit and one memory limit per GPU: each GPU
// once, and every GPU the same cores. (Which pods a claim serves is the
// node's record's to say: Ruleset.Claims.)
func claimsRefused(c NamedContainer) string {
	seen := map[string]bool{}
	for _, g := range c.Claimed {
		if seen[g.Slice.UUID] {
			return "two of its claim devices are shares of GPU " + g.Slice.UUID + ": ask one share per GPU (a claim of several GPUs keeps them apart with the constraint distinctAttribute: " + wellknown.DRADriver + "/uuid)"
		}
		seen[g.Slice.UUID] = true
		if first := c.Claimed[0].Slice; g.Slice.Cores != first.Cores || g.Slice.MIG != first.MIG {
			return "its claims differ in cores, or mix MIG instances and shares, but a container has one SM limit: ask the same cores of each"
		}
	}
	return ""
}

// claimed grants c the devices the node prepared for its DRA claims.
func claimed(c NamedContainer, spec *corev1.Container, r Ruleset) Decision {
	ca := protocol.ContainerAssignment{Name: c.Name}
	cg := &cdiGrant{}
	for _, g := range c.Claimed {
		ca.GPUs = append(ca.GPUs, g.Slice)
		cg.names = append(cg.names, g.CDI)
		cg.nodes = append(cg.nodes, g.Nodes...)
	}
	var priority *int
	if spec != nil {
		priority = grant.Priority(spec, r.Resources)
	}
	return Decision{Action: Grant, Slice: grant.For(ca, c.UID, priority, r.Slice), Assigned: ca, Claimed: cg}
}
