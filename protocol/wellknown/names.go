// Package wellknown is the names every part of vgpud, and its users, read:
// the annotations and labels vgpud writes or reads, the extended resources
// it serves, and the MIG profiles' resources.
package wellknown

// Annotations and labels vgpud writes or reads.
const (
	// AnnotationGPUs is the node's GPU inventory, written by the node role.
	AnnotationGPUs = "vgpud.io/gpus"
	// AnnotationAssignment is the GPUs chosen for a pod, written by the leader in bind.
	AnnotationAssignment = "vgpud.io/assignment"
	// AnnotationPhase tracks a pod from bind to Allocate; see protocol.Phase.
	AnnotationPhase = "vgpud.io/phase"
	// AnnotationRequeued is the leader's nudge on a pending pod it refused
	// just before GPUs freed: a change to the pod makes kube-scheduler try
	// it again at once. Its value (a time) means nothing else.
	AnnotationRequeued = "vgpud.io/requeued"
	// AnnotationPlugin is the node's device plugin state, written by the
	// node role: PluginServing once kubelet registered it and read the
	// devices, PluginDraining from the moment it starts to stop,
	// PluginWaiting while kubelet holds no stream to it (kubelet is
	// restarting). The leader binds only to serving nodes, so no pod is
	// bound to a plugin that is going away or a kubelet that cannot admit
	// it. PluginClaims: the node serves DRA claims instead (--dra), and
	// runs no device plugin.
	AnnotationPlugin = "vgpud.io/plugin"
	PluginServing    = "serving"
	PluginDraining   = "draining"
	PluginWaiting    = "waiting"
	PluginClaims     = "claims"

	// AnnotationIdentity says how the node's containers get their GPUs,
	// written by the node role. IdentityRuntime: the container runtime
	// names each container's pod to vgpud's NRI hook, so the leader binds
	// to the node without waiting for its previous pod. IdentityGuessed
	// (no NRI socket): Allocate picks the one pod bound and waiting, so
	// the leader binds one pod at a time there and the node records each
	// pod's phase.
	AnnotationIdentity = "vgpud.io/identity"

	// AnnotationUsage is the node's latest sample of its GPUs' processes
	// (protocol.NodeUsage), written by the node role for `vgpud inspect --cluster`.
	AnnotationUsage = "vgpud.io/usage"

	// AnnotationRuntime is the node's latest runtime check (protocol.RuntimeCheck):
	// whether its container runtime fails closed without vgpud, written by
	// the node role for `vgpud inspect --cluster`.
	AnnotationRuntime = "vgpud.io/runtime-check"

	// AnnotationHookOptional lets a pod's containers be created while
	// vgpud's NRI hook is not connected, where the runtime's NRI
	// validator is set up as vgpud's drop-in says: vgpud's own pods, and
	// those that must start before it. Admission lets only vgpud's
	// namespace and the cluster's early namespaces use it.
	AnnotationHookOptional = "vgpud.io/runtime-hook-optional"

	// AnnotationRequiredPlugins is NRI's own (its default validator's
	// per-pod list, github.com/containerd/nri pkg/plugin): admission
	// sets it to RequiredPluginsVgpud on every pod that could reach a
	// GPU, so that the runtime creates none of its containers without
	// vgpud's hook, while other pods start whether vgpud runs or not.
	// Container-scoped keys (…/container.NAME) and …/pod override it;
	// admission holds them to listing vgpud too.
	AnnotationRequiredPlugins = "required-plugins.noderesource.dev"
	RequiredPluginsVgpud      = `["vgpud"]`
	IdentityRuntime           = "runtime"
	IdentityGuessed           = "guessed"

	// LabelRole marks the replica that leads; the Service selects on it.
	LabelRole = "vgpud.io/role"
	// RoleLeader is the value of LabelRole on the leader's pod.
	RoleLeader = "leader"

	// LabelNodeSetup is the outcome of the chart's node setup on a node,
	// written by its init container: NodeSetupPending while it changes
	// files, then NodeSetupDone, NodeSetupFailed or
	// NodeSetupRestartNeeded; removed when the node is reverted, or
	// NodeSetupRevertRestartNeeded where the revert may not restart the
	// runtime. AnnotationNodeSetup beside it says why, for a person.
	LabelNodeSetup               = "vgpud.io/node-setup"
	AnnotationNodeSetup          = "vgpud.io/node-setup"
	NodeSetupPending             = "pending"
	NodeSetupDone                = "done"
	NodeSetupFailed              = "failed"
	NodeSetupRestartNeeded       = "restart-needed"
	NodeSetupRevertRestartNeeded = "revert-restart-needed"
	// LeaseNodeSetup is the Lease a node's setup holds while it restarts
	// the node's runtime: one node at a time across the cluster.
	LeaseNodeSetup = "vgpud-node-setup"

	// The node's own report of what it serves, each replica on its own
	// node (inventory.Labels): the model (NVIDIA's name with spaces as
	// dashes; "mixed" where they differ), how many GPUs, the smallest
	// GPU's memory as offered in MiB (after memoryScaling), the split,
	// and whether a GPU can run MIG and whether it does
	// (MIGEnabled, MIGDisabled or MIGMixed).
	LabelGPUProduct = "vgpud.io/gpu.product"
	LabelGPUCount   = "vgpud.io/gpu.count"
	LabelGPUMemory  = "vgpud.io/gpu.memory"
	LabelGPUSplit   = "vgpud.io/gpu.split"
	LabelMIGCapable = "vgpud.io/mig.capable"
	LabelMIGMode    = "vgpud.io/mig.mode"
	MIGEnabled      = "enabled"
	MIGDisabled     = "disabled"
	MIGMixed        = "mixed"
	// (NodeReportLabels lists them.)
	// LabelGPUNode set to "true" by an administrator places vgpud's
	// DaemonSet on a node that neither NFD nor GPU feature discovery
	// labels; vgpud never writes it.
	LabelGPUNode = "vgpud.io/gpu"

	// LabelGPUAgents set to "true" on a namespace by a cluster
	// administrator (policy vgpud-gpu-agents fences it) lets the pods of
	// that namespace's agent ServiceAccounts (--gpu-agent-accounts) keep
	// every GPU their image or pod names: DCGM exporter and the like.
	LabelGPUAgents = "vgpud.io/gpu-agents"
	// LabelWebhook set to WebhookIgnore on a pod or namespace opts it out of admission.
	LabelWebhook = "vgpud.io/webhook"
	// LabelWebhookHAMi is HAMi's opt-out label, honoured so workloads move over unchanged.
	LabelWebhookHAMi = "hami.io/webhook"
	// WebhookIgnore is the opt-out value.
	WebhookIgnore = "ignore"
)

// Annotations a user may set on a pod.
const (
	AnnotationUseGPUType   = "nvidia.com/use-gputype"
	AnnotationNoUseGPUType = "nvidia.com/nouse-gputype"
	AnnotationUseGPUUUID   = "nvidia.com/use-gpuuuid"
	AnnotationNoUseGPUUUID = "nvidia.com/nouse-gpuuuid"

	// AnnotationNUMABind "true" keeps all of a container's GPUs on one
	// NUMA node (HAMi's name and meaning).
	AnnotationNUMABind = "nvidia.com/numa-bind"

	// AnnotationGPUMode picks how a pod's GPUs are served: "mig" (whole
	// MIG instances) or "shared" (slices of GPUs not in MIG mode, as
	// when it is absent). AnnotationGPUModeHAMi is HAMi's ("mig",
	// "hami-core"), read when vgpud's is absent.
	AnnotationGPUMode     = "vgpud.io/gpu-mode"
	AnnotationGPUModeHAMi = "nvidia.com/vgpu-mode"

	AnnotationNodePolicy     = "vgpud.io/node-policy"
	AnnotationGPUPolicy      = "vgpud.io/gpu-policy"
	AnnotationNodePolicyHAMi = "hami.io/node-scheduler-policy"
	AnnotationGPUPolicyHAMi  = "hami.io/gpu-scheduler-policy"
)

// ResourceNames are the extended resources vgpud serves. They are
// configurable so vgpud can run beside another plugin; the defaults match HAMi.
type ResourceNames struct {
	GPU              string // count of vGPUs (distinct physical GPUs)
	GPUMem           string // MiB per vGPU
	GPUMemPercentage string // percent of each GPU's memory
	GPUCores         string // percent of each GPU's SMs
	Priority         string // task priority, passed to the container as env
}

// DefaultResourceNames returns HAMi-compatible names.
func DefaultResourceNames() ResourceNames {
	return ResourceNames{
		GPU:              "nvidia.com/gpu",
		GPUMem:           "nvidia.com/gpumem",
		GPUMemPercentage: "nvidia.com/gpumem-percentage",
		GPUCores:         "nvidia.com/gpucores",
		Priority:         "nvidia.com/priority",
	}
}

// All lists the names in a fixed order.
func (r ResourceNames) All() []string {
	return []string{r.GPU, r.GPUMem, r.GPUMemPercentage, r.GPUCores, r.Priority}
}

// AnnotationCordon on a node takes some of its GPUs out of new
// placements: a comma-separated list of GPU UUIDs (GPU-…) or indices.
// Pods already on them run on. An operator writes it (kubectl annotate);
// the vgpud-gpu-cordon policy lets only those RBAC grants the verb
// "cordon" on gpus.vgpud.io change it. vgpud reads it and never writes it.
const AnnotationCordon = "vgpud.io/cordon"

// AnnotationCordonHAMi is HAMi's name for the same (UUIDs only there):
// vgpud honours both, and the policy guards both.
const AnnotationCordonHAMi = "hami.io/device-cordon"

// NodeReportLabels are the labels the node role writes on its node: a
// node's revert takes them off with vgpud.
func NodeReportLabels() []string {
	return []string{LabelGPUProduct, LabelGPUCount, LabelGPUMemory, LabelGPUSplit, LabelMIGCapable, LabelMIGMode}
}

// vgpud's DRA driver, where a node serves claims (--dra).
const (
	// DRADriver is the driver's name: its ResourceSlices', its
	// DeviceClass's selector's, and the domain of its devices'
	// attributes and capacities.
	DRADriver = "gpu.vgpud.io"
	// DRAClaimCDIKind is the CDI kind of the devices the node prepares
	// for claims, one per allocated device, named <claim UID>-<index>:
	// the runtime hook knows a claim's container by them.
	DRAClaimCDIKind = DRADriver + "/claim"
	// DRAClassGPU and DRAClassMIG are the manifest's DeviceClasses: a
	// share of a whole GPU, and an existing MIG instance.
	DRAClassGPU = "vgpud-gpu"
	DRAClassMIG = "vgpud-mig"
	// LabelGPUClaims "true" on a namespace (an administrator's) has the
	// webhook turn its pods' vGPU resources into DRA claims
	// (webhook/claims.go), for nodes that serve claims.
	LabelGPUClaims = "vgpud.io/gpu-claims"
	// ClaimTemplatePrefix begins the name of each ResourceClaimTemplate
	// the webhook makes for converted pods.
	ClaimTemplatePrefix = "vgpud-"
	// LabelManagedBy is ManagedByVgpud on what vgpud makes in other
	// namespaces (the claim templates).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByVgpud = "vgpud"
)
