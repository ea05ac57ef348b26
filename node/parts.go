package node

import (
	"context"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/node/internal/deviceplugin"
	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/health"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podevents"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// nodeParts are the node role's parts once its GPUs are known, built and
// not yet running.
type nodeParts struct {
	server        *deviceplugin.PluginServer
	profiles      *deviceplugin.ProfileServers // nil where the runtime does not name pods
	health        *health.Watcher
	publisher     *inventory.Publisher
	healthChanged chan protocol.Inventory // the newest inventory, for publisher
	// republish sends publisher the inventory built again: with the
	// GPUs' health as given, or as last given where nil.
	republish func(unhealthy map[string]bool)
	check     *deviceplugin.PodResourcesCheck
	events    podevents.Sink
}

// build makes the parts that serve devs and wires them to each other and
// to the role's state, which inspect and readiness read.
func (a *Role) build(ctx context.Context, lib nvml.Interface, devs []gpu.Device, pods *nodepods.Index, mode string, tracker *health.Tracker) *nodeParts {
	scaling := a.cfg.Sharing.Scaling()
	// The tracker outlives a rescan: a GPU that was unhealthy stays so
	// until its quiet period ends, whatever the rescan found.
	unhealthy := tracker.Unhealthy()
	inv := inventory.Build(devs, scaling, unhealthy, a.od.State())
	gpus, uuids := deviceplugin.Advertised(devs, inventory.Build(devs, scaling, unhealthy, a.od.Advertisable()))
	for _, d := range devs {
		if d.MIG != nil && len(d.MIG.Skipped) > 0 {
			a.log.Warn("MIG devices not offered", "gpu", d.UUID, "skipped", d.MIG.Skipped)
		}
	}
	p := deviceplugin.New(deviceplugin.Params{
		Node: a.node, Resources: a.resources, Split: a.cfg.Sharing.Split,
		Oversubscribe: a.cfg.Sharing.MemoryScaling > 1, Interposer: a.cfg.Slices.InterposerDir, ResolveWait: a.cfg.Plugin.AllocateWait,
		RuntimeNamesPods: mode == wellknown.IdentityRuntime,
	}, gpus, pods, nodepods.NewPhaseWriter(a.api.Core), a.metrics, a.clock, a.log.With("component", "plugin"))
	parts := &nodeParts{publisher: inventory.NewPublisher(a.api.Core, a.node), healthChanged: make(chan protocol.Inventory, 1)}
	// What the node serves, as labels a nodeSelector can use: each
	// generation (a rescan that found the GPUs changed) writes them anew.
	parts.publisher.SetLabels(inventory.Labels(devs, scaling))
	parts.server = deviceplugin.NewServer(p, a.cfg.Plugin.DevicePluginDir, a.cfg.Plugin.DevicePluginSocket, parts.publisher, a.clock, a.log.With("component", "plugin"))
	if a.cfg.Plugin.PodResourcesSocket != "" && a.cfg.Pod != "" {
		parts.server.AwaitKubeletPods(a.cfg.Pod, func(ctx context.Context) ([]string, error) {
			return kubeletapi.ListPods(ctx, a.cfg.Plugin.PodResourcesSocket)
		})
	}
	switch {
	case !a.cfg.Plugin.MIGProfileResources:
	case mode == wellknown.IdentityRuntime:
		parts.profiles = deviceplugin.NewProfileServers(p, gpus, a.resources, a.cfg.Plugin.DevicePluginDir, a.cfg.Plugin.DevicePluginSocket, a.clock, a.log.With("component", "mig-profiles"))
	case slices.ContainsFunc(gpus, func(g deviceplugin.AdvertisedGPU) bool { return g.Parent != "" }):
		// Where kubelet's device IDs say which pod gets which instance,
		// an instance counted under two resources could go to two pods.
		a.log.Warn("MIG instances are offered under the GPU resource only: their profiles' own resources need the runtime hook (NRI), which names each container's pod")
	}
	a.mu.Lock()
	a.server, a.podCache, a.notReady = parts.server, pods, ""
	a.inv, a.invReady = inv, true
	a.mu.Unlock()
	if len(unhealthy) > 0 {
		p.SetUnhealthy(unhealthy)
	}
	a.metrics.Health(uuids, unhealthy)

	// republish builds the inventory again, with the GPUs' health as
	// last told and what the node made on demand now, for the publisher.
	var lastMu sync.Mutex
	last := unhealthy
	parts.republish = func(now map[string]bool) {
		lastMu.Lock()
		defer lastMu.Unlock()
		if now != nil {
			last = now
		}
		inv := inventory.Build(devs, scaling, last, a.od.State())
		a.mu.Lock()
		a.inv = inv
		a.mu.Unlock()
		// Keep only the newest inventory for the publisher.
		select {
		case <-parts.healthChanged:
		default:
		}
		parts.healthChanged <- inv
	}
	onHealth := func(unhealthy map[string]bool) {
		p.SetUnhealthy(unhealthy)
		a.metrics.Health(uuids, unhealthy)
		parts.republish(unhealthy)
	}
	parts.health = health.NewWatcher(lib, uuids, tracker, onHealth, a.clock, a.log.With("component", "health"))
	// Where the runtime names pods, kubelet's device IDs are bookkeeping
	// only, not the pod's GPUs: there is nothing to cross-check.
	if a.cfg.Plugin.PodResourcesSocket != "" && mode == wellknown.IdentityGuessed {
		parts.check = a.podResourcesCheck(ctx, pods, parts)
	}
	return parts
}

// podResourcesCheck compares kubelet's PodResources with each pod's
// assignment every PodResourcesPeriod, and reports a mismatch as an Event
// and a metric.
func (a *Role) podResourcesCheck(ctx context.Context, pods *nodepods.Index, parts *nodeParts) *deviceplugin.PodResourcesCheck {
	events, err := podevents.Start(ctx, a.api.Events)
	if err != nil {
		// Only a broadcaster already shut down refuses; the check still
		// counts mismatches in the metric.
		a.log.Warn("no Events for PodResources mismatches", "err", err)
	}
	parts.events = events
	report := events.As(corev1.EventTypeWarning, "Checking")
	return &deviceplugin.PodResourcesCheck{
		Node: a.node, Socket: a.cfg.Plugin.PodResourcesSocket, Resource: a.resources.GPU, Pods: pods, Period: a.cfg.Plugin.PodResourcesPeriod,
		Report: func(m deviceplugin.Mismatch) {
			a.metrics.PodResourcesMismatch()
			if err == nil {
				report(m.Pod, "DevicesDisagree", m.Message)
			}
		},
		Clock: a.clock, Log: a.log.With("component", "podresources"),
	}
}
