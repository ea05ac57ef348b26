// Package deviceplugin is vgpud's kubelet device plugin (API v1beta1): it
// advertises split virtual devices per healthy GPU and answers Allocate
// from the assignment the leader wrote on the one pod bound to this node.
package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// PodSource is this node's pods, from an informer.
type PodSource interface {
	List() []*corev1.Pod
	// Changed returns a channel closed at the next change.
	Changed() <-chan struct{}
	// Fresh reads the node's pods from the API itself, for the one
	// decision the informer's lag could get wrong (see servesDying).
	Fresh(ctx context.Context) ([]*corev1.Pod, error)
}

// Phases records vgpud.io/phase on a pod.
type Phases interface {
	SetPhase(ctx context.Context, pod *corev1.Pod, phase protocol.Phase) error
}

// PluginObserver is told of the plugin's outcomes (the node's metrics).
type PluginObserver interface {
	Allocated(ok bool, took time.Duration)
	Registered(err error)
}

// Params are what the plugin serves with.
type Params struct {
	Node      string
	Resources wellknown.ResourceNames // Resources.GPU is the name registered with kubelet
	Split     int
	// Oversubscribe tells the interposer that memory is scaled above 1.
	Oversubscribe bool
	// Interposer is a host directory holding libvgpu.so; "" mounts nothing.
	Interposer string
	// ResolveWait bounds how long Allocate waits for the informer to show
	// the bound pod, which kubelet may see a moment before this replica.
	ResolveWait time.Duration
	// RuntimeNamesPods is set where the container runtime calls vgpud's
	// NRI hook: Allocate then picks no pod and answers only kubelet's
	// device bookkeeping; the hook sets each container's own slice.
	RuntimeNamesPods bool
}

// Plugin serves the DevicePlugin gRPC service.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	opts   Params
	gpus   []AdvertisedGPU
	numa   map[string]int
	pods   PodSource
	phases Phases
	obs    PluginObserver
	clock  clock.Clock
	log    *slog.Logger

	mu        sync.Mutex
	unhealthy map[string]bool
	devices   []*pluginapi.Device
	changed   chan struct{} // closed when devices change
	listings  uint64        // ListAndWatch streams that have sent kubelet the devices
	streams   int           // of those, the ones still open
	listed    chan struct{} // closed when listings or streams change

	// allocating serialises Allocate and GetPreferredAllocation, as
	// kubelet does, so progress is read and written by one call at a
	// time (lockAlloc). A channel, not a mutex: idle's wait for it ends
	// with its context.
	allocating chan struct{}
	progress   map[types.UID]*progress
}

// New returns a plugin for gpus, all healthy. obs may be nil; clk times
// Allocate's waits and the phase writes it retries.
func New(opts Params, gpus []AdvertisedGPU, pods PodSource, phases Phases, obs PluginObserver, clk clock.Clock, log *slog.Logger) *Plugin {
	if obs == nil {
		obs = noObserver{}
	}
	p := &Plugin{
		opts: opts, gpus: gpus, numa: make(map[string]int, len(gpus)),
		pods: pods, phases: phases, obs: obs, clock: clk, log: log,
		unhealthy: map[string]bool{}, changed: make(chan struct{}), listed: make(chan struct{}),
		allocating: make(chan struct{}, 1), progress: map[types.UID]*progress{},
	}
	for _, g := range gpus {
		p.numa[g.UUID] = g.NUMA
	}
	p.devices = virtualDevices(gpus, opts.Split, nil)
	return p
}

// SetUnhealthy replaces the unhealthy set; ListAndWatch streams the change.
func (p *Plugin) SetUnhealthy(unhealthy map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unhealthy = unhealthy
	p.devices = virtualDevices(p.gpus, p.opts.Split, unhealthy)
	close(p.changed)
	p.changed = make(chan struct{})
}

// Devices returns the advertised devices and a channel closed when they change.
func (p *Plugin) Devices() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devices, p.changed
}

// GetDevicePluginOptions tells kubelet to ask for preferred allocations.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// Listings returns how many ListAndWatch streams have sent kubelet the
// devices, and a channel closed when that grows (or Streams changes).
// kubelet opens the stream only after Register returns, and has no
// healthy device until it reads the first list.
func (p *Plugin) Listings() (uint64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listings, p.listed
}

// Streams returns how many ListAndWatch streams that sent kubelet the
// devices are still open, and a channel closed when that changes. None
// open means kubelet went away (it is restarting, or it dropped this
// plugin): it cannot admit a GPU pod until a new registration.
func (p *Plugin) Streams() (int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams, p.listed
}

// countStream counts a stream that has sent the devices (opened) or
// ended.
func (p *Plugin) countStream(opened bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if opened {
		p.listings++
		p.streams++
	} else {
		p.streams--
	}
	close(p.listed)
	p.listed = make(chan struct{})
}

// ListAndWatch sends the device list, then again at every health change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	send := func(devs []*pluginapi.Device) error {
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return fmt.Errorf("send devices to kubelet: %w", err)
		}
		return nil
	}
	devs, changed := p.Devices()
	if err := send(devs); err != nil {
		return err
	}
	p.countStream(true)
	defer p.countStream(false)
	for {
		select {
		case <-s.Context().Done():
			return nil
		case <-changed:
		}
		devs, changed = p.Devices()
		if err := send(devs); err != nil {
			return err
		}
	}
}

// GetPreferredAllocation prefers slices of the GPUs the leader assigned to
// the container being admitted, so the kubelet's own record (PodResources)
// names the same GPUs and Allocate accepts them; without an assignment it
// keeps a request on one NUMA node where it can. Like Allocate it waits
// for the informer to show the bound pod: kubelet may see the Binding
// before this replica does, and a guess made then would be refused.
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.lockAlloc()
	defer p.unlockAlloc()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		if p.opts.RuntimeNamesPods {
			// Which pod this is, nobody here knows: any free slices do.
			resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
				DeviceIDs: preferred(cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), nil, p.numa)})
			continue
		}
		var want []string
		t, err := p.waitForTarget(ctx, nil)
		if err == nil {
			want = t.wantUUIDs()
		} else {
			p.log.Warn("preferring devices without a pod: kubelet may pick GPUs Allocate then refuses", "err", err)
		}
		ids := preferred(cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), want, p.numa)
		// Allocate refuses slices of GPUs the pod was not assigned; say here
		// which assigned GPU kubelet had no free slice of, with what kubelet
		// offered, so that refusal can be traced.
		if missing := notPreferred(want, ids); len(missing) > 0 {
			p.log.Warn("kubelet offers no free slice of an assigned GPU", "pod", t.pod.Namespace+"/"+t.pod.Name, "container", t.container.Name,
				"missing", missing, "available", len(cr.AvailableDeviceIDs), "mustInclude", cr.MustIncludeDeviceIDs, "preferred", ids)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// notPreferred is the GPUs in want that no ID in ids is a slice of.
func notPreferred(want, ids []string) []string {
	var out []string
	for _, uuid := range want {
		if !slices.ContainsFunc(ids, func(id string) bool { u, _ := splitID(id); return u == uuid }) {
			out = append(out, uuid)
		}
	}
	return out
}

// settled waits until no pod bound to this node waits for Allocate and
// the quiet period has passed, or ctx ends; it returns a pod still
// waiting, "" when there is none. The quiet period catches a bind the
// leader began before it read "draining": its pod shows up here a little
// later.
func (p *Plugin) settled(ctx context.Context, quietFor time.Duration) string {
	quietUntil := p.clock.Now().Add(quietFor)
	quiet := p.clock.NewTimer(quietFor)
	defer quiet.Stop()
	for {
		changed := p.pods.Changed()
		waiting := ""
		for _, pod := range p.pods.List() {
			if _, why := candidate(p.opts.Node, pod, p.progressSnapshot(pod.UID)); why == "" {
				waiting = pod.Namespace + "/" + pod.Name
				break
			}
		}
		if waiting == "" && !p.clock.Now().Before(quietUntil) {
			return ""
		}
		select {
		case <-changed:
		case <-quiet.C():
		case <-ctx.Done():
			return waiting
		}
	}
}

// progressSnapshot is what this replica has allocated of a pod (read under
// the Allocate lock).
func (p *Plugin) progressSnapshot(uid types.UID) *progress {
	p.lockAlloc()
	defer p.unlockAlloc()
	pr := p.progress[uid]
	if pr == nil {
		return nil
	}
	return &progress{done: maps.Clone(pr.done), final: pr.final}
}

// lockAlloc takes the Allocate lock; unlockAlloc gives it back.
func (p *Plugin) lockAlloc()   { p.allocating <- struct{}{} }
func (p *Plugin) unlockAlloc() { <-p.allocating }

// idle waits until no Allocate or GetPreferredAllocation is in flight (and
// none can start before the server stops), or ctx ends; it reports which.
func (p *Plugin) idle(ctx context.Context) bool {
	// Held until the process exits: the server stops right after. A free
	// slot is taken even when ctx has ended, which select alone would
	// leave to chance.
	select {
	case p.allocating <- struct{}{}:
		return true
	default:
	}
	select {
	case p.allocating <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

type noObserver struct{}

func (noObserver) Allocated(bool, time.Duration) {}
func (noObserver) Registered(error)              {}
