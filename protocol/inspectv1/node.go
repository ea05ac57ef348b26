// Package inspectv1 is what vgpud prints for people and programs to read,
// version 1: `vgpud inspect --json` (NodeSnapshot, a node as its daemon
// sees it) and `kubectl vgpud -o json|yaml` (ClusterView, the cluster as
// vgpud books it). A reader checks APIVersion; fields are only added
// within a version, never renamed or removed. A node's published usage
// and runtime check appear in ClusterView as the node wrote them
// (protocol.NodeUsage, protocol.RuntimeCheck), whose wire versions only
// add fields too (protocol's skew rules).
package inspectv1

import "time"

// NodeVersion is NodeSnapshot's APIVersion.
const NodeVersion = "vgpud.io/inspect/v1"

// NodeSnapshot is everything `vgpud inspect` shows.
type NodeSnapshot struct {
	// APIVersion is NodeVersion: what a reader checks before decoding.
	APIVersion string `json:"apiVersion"`
	Node       string `json:"node"`
	Backend    string `json:"backend"`
	Ready      bool   `json:"ready"`
	NotReady   string `json:"notReady,omitempty"` // why not, when not
	Role       string `json:"role"`               // "node" or "node+cluster"
	// Identity is how the node tells a container's pod: "runtime" (NRI)
	// or "guessed"; Runtime says how the NRI hook stands.
	Identity string `json:"identity"`
	Runtime  string `json:"runtime,omitempty"`
	// RuntimeCheck is the latest reading of the runtime's configuration:
	// whether it fails closed without vgpud. nil before the first, or
	// where --runtime-config is empty.
	RuntimeCheck *RuntimeVerdict `json:"runtimeCheck,omitempty"`
	Leader       string          `json:"leader"` // the current leader's pod, "" if unknown
	IsLeader     bool            `json:"isLeader"`
	GPUs         []GPUState      `json:"gpus"`
	// CordonProblem says what in the node's vgpud.io/cordon names no GPU
	// here or cannot be read; "" when nothing.
	CordonProblem string       `json:"cordonProblem,omitempty"`
	Allocations   []Allocation `json:"allocations"`
	// DRA: the node serves DRA claims (--dra); Claims are the devices it
	// prepared for them, from its prepare record (on a node moved back
	// to the device plugin, those it keeps until their pods end).
	DRA          bool                `json:"dra,omitempty"`
	Claims       []ClaimAllocation   `json:"claims,omitempty"`
	Registration KubeletRegistration `json:"registration"`
	// Use is the latest sample of the GPUs' processes; nil before the
	// GPUs are found.
	Use   *GPUUse   `json:"use,omitempty"`
	Taken time.Time `json:"taken"`
}

// GPUState is one GPU with what the pods on it hold.
type GPUState struct {
	Index         int    `json:"index"`
	UUID          string `json:"uuid"`
	Model         string `json:"model"`
	NUMA          int    `json:"numa"`
	MemoryMiB     int64  `json:"memoryMiB"` // after memory scaling
	MemoryUsedMiB int64  `json:"memoryUsedMiB"`
	Cores         int    `json:"cores"`
	CoresUsed     int    `json:"coresUsed"`
	Slices        int    `json:"slices"`
	SlicesUsed    int    `json:"slicesUsed"`
	Healthy       bool   `json:"healthy"`
	// Cordoned: an operator took it out of new placements
	// (vgpud.io/cordon on the node); its pods run on.
	Cordoned bool `json:"cordoned,omitempty"`
	// MIG, for a MIG instance, is its profile and Parent its GPU's UUID;
	// the row's memory is the instance's, its cores its share of the
	// GPU's SMs, and it has one slice, held whole.
	MIG    string `json:"mig,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// Allocation is one container's share of one GPU.
type Allocation struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	Phase     string `json:"phase"`
}

// ClaimAllocation is one device the node prepared for a DRA claim.
type ClaimAllocation struct {
	Namespace string   `json:"namespace"`
	Claim     string   `json:"claim"`
	Pods      []string `json:"pods"` // names where the node knows them, else UIDs
	Device    string   `json:"device"`
	GPU       string   `json:"gpu"`
	MemoryMiB int64    `json:"memoryMiB"`
	Cores     int      `json:"cores"`
}

// KubeletRegistration is the device plugin's record with kubelet.
type KubeletRegistration struct {
	Count     int       `json:"count"`
	Last      time.Time `json:"last,omitzero"`
	LatencyMs float64   `json:"latencyMs"`
	Trigger   string    `json:"trigger,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// RuntimeVerdict is the node's latest reading of its container runtime's
// configuration.
type RuntimeVerdict struct {
	Result  string `json:"result"`  // fails-closed, fails-open or unknown
	Runtime string `json:"runtime"` // "containerd" or "cri-o"
	Config  string `json:"config"`  // the main file, as the runtime names it
	// Scope is what fails closed: all, or gpu-pods (those admission
	// marks as able to reach a GPU); empty when nothing does.
	Scope string `json:"scope,omitempty"`
	// Files are the files merged, in the runtime's order.
	Files []string `json:"files,omitempty"`
	// Problems say what to change, one each.
	Problems []string `json:"problems,omitempty"`
	// CDI is whether the runtime injects CDI devices, and from which
	// directories: where it does, the hook also hands out GPUs as the
	// devices of the node's NVIDIA spec (--cdi).
	CDI RuntimeCDI `json:"cdi"`
}

// RuntimeCDI is the runtime's CDI settings, as its configuration says.
type RuntimeCDI struct {
	Enabled  bool     `json:"enabled"`
	SpecDirs []string `json:"specDirs,omitempty"`
}

// GPUUse is what the node's latest sample of its GPUs' processes showed
// (--gpu-usage): each container's use against its slice, and what no
// granted container owns.
type GPUUse struct {
	Mode         string         `json:"mode"`
	Taken        time.Time      `json:"taken"`
	Containers   []ContainerUse `json:"containers"`
	Unattributed []ProcessUse   `json:"unattributed"`
	// GPUs are, per GPU with any, the memory it holds beyond the slices
	// booked on it (what the leader counts as used) and whether it is
	// full: its processes hold more than its memory less the reserve,
	// and vgpud may not end what is over.
	GPUs []HeldOnGPU `json:"gpus,omitempty"`
	// Ends are containers ended whole for memory listed under PIDs that
	// had ended, whose memory is still listed.
	Ends []UsageEnd `json:"ends,omitempty"`
}

// HeldOnGPU is memory one GPU holds beyond its bookings.
type HeldOnGPU struct {
	GPU     string `json:"gpu"`
	HeldMiB uint64 `json:"heldMiB"`
	Full    bool   `json:"full,omitempty"`
	// Pods are, of HeldMiB, what a known pod's processes opened: charged
	// to its namespace.
	Pods []PodHeld `json:"pods,omitempty"`
}

// PodHeld is memory a GPU holds that a pod's process opened.
type PodHeld struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	MiB       uint64 `json:"mib"`
}

// UsageEnd is how far the node went to free a container's memory.
type UsageEnd struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	Stage     string `json:"stage"`
}

// ContainerUse is one container's use of one GPU.
type ContainerUse struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	GPU       string `json:"gpu"`
	UsedMiB   uint64 `json:"usedMiB"`
	SliceMiB  uint64 `json:"sliceMiB"`
	Whole     bool   `json:"whole,omitempty"`
	Over      bool   `json:"over,omitempty"` // past its slice plus the margin
	// Stuck: over, with only PIDs that ended left to hold it (a child or
	// another process keeps the descriptor): the container is ended whole.
	Stuck bool `json:"stuck,omitempty"`
	// SMPercent is its processes' share of SM time; -1 where the driver
	// gave no sample. Cores is its gpucores, to read it against.
	SMPercent int `json:"smPercent"`
	Cores     int `json:"cores"`
	Processes int `json:"processes"`
	Kills     int `json:"kills"` // processes killed for memory, since vgpud started
	// Claim, for a DRA claim's share that several containers use, is the
	// claim's "namespace/name", and SharedMiB what they all hold on the
	// GPU: the slice holds them together.
	Claim     string `json:"claim,omitempty"`
	SharedMiB uint64 `json:"sharedMiB,omitempty"`
}

// ProcessUse is a process on a GPU that no granted container owns.
type ProcessUse struct {
	GPU     string `json:"gpu"`
	PID     int    `json:"pid"`
	UsedMiB uint64 `json:"usedMiB"`
	// Orphaned: the PID no longer runs what opened the GPU. Namespace and
	// Pod name who held it first, where a pod did: the memory stays
	// charged to that namespace until the driver frees it.
	Orphaned  bool   `json:"orphaned,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
}
