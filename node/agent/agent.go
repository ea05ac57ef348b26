// Package agent runs the node role: GPU discovery, the device plugin and
// its registration, health, the inventory annotation and the inspect
// socket. main wires it; this package sequences it.
package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/node"
	"github.com/vgpud/vgpud/node/gpu"
	"github.com/vgpud/vgpud/node/health"
	"github.com/vgpud/vgpud/node/inspect"
	"github.com/vgpud/vgpud/node/inventory"
	"github.com/vgpud/vgpud/node/plugin"
	"github.com/vgpud/vgpud/node/podwatch"
	"github.com/vgpud/vgpud/protocol"
)

// LeaderStatus says who leads; the cluster role's elector satisfies it, or
// a Lease reader when this replica runs the node role alone.
type LeaderStatus interface {
	Leader() string
	IsLeader() bool
}

// Metrics are the node's metrics as the agent feeds them.
type Metrics interface {
	plugin.Observer
	Health(uuids []string, unhealthy map[string]bool)
	PodResourcesMismatch()
}

// Agent is the node role of one replica.
type Agent struct {
	cfg       node.Config
	node      string
	resources protocol.ResourceNames
	core      typedcorev1.CoreV1Interface
	leader    LeaderStatus
	role      string
	metrics   Metrics
	log       *slog.Logger

	mu       sync.Mutex
	notReady string
	inv      protocol.Inventory
	server   *plugin.Server
	podCache *podwatch.Cache
}

// New returns the node role for nodeName; role names what this replica
// runs, for inspect.
func New(cfg node.Config, nodeName string, resources protocol.ResourceNames, core typedcorev1.CoreV1Interface, leader LeaderStatus, role string, m Metrics, log *slog.Logger) *Agent {
	return &Agent{cfg: cfg, node: nodeName, resources: resources, core: core, leader: leader, role: role, metrics: m, log: log, notReady: "starting"}
}

// Ready reports whether the plugin is registered with kubelet, and why not.
func (a *Agent) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.notReady != "" {
		return false, a.notReady
	}
	if a.server == nil {
		return false, "device plugin not started"
	}
	if r := a.server.Registration(); r.Count == 0 {
		return false, "device plugin not registered with kubelet yet"
	}
	return true, ""
}

// Run runs the node role until ctx ends. Settings that cannot work (bad
// overrides, a missing interposer, an exclusion matching no GPU) end it
// with an error; a missing driver is retried, with the reason shown by
// inspect and in the log.
func (a *Agent) Run(ctx context.Context) error {
	cfg, err := a.cfg.ForNode(a.node)
	if err != nil {
		return err
	}
	a.cfg = cfg
	if cfg.Interposer != "" {
		if err := plugin.PrepareInterposer(cfg.Interposer); err != nil {
			return err
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	lib, err := gpu.Open(a.cfg.Backend, a.node)
	if err != nil {
		return err
	}
	var inject inspect.Injector
	if m, ok := lib.(*gpu.Mock); ok {
		inject = m.InjectXIDByName
	}
	g.Go(func() error {
		return inspect.Serve(ctx, cfg.InspectSocket, a.snapshot, inject, a.log.With("component", "inspect"))
	})
	g.Go(func() error { return a.serve(ctx, g, lib) })
	return g.Wait()
}

// serve discovers the GPUs (retrying without a driver), then starts the
// parts that need them.
func (a *Agent) serve(ctx context.Context, g *errgroup.Group, lib nvml.Interface) error {
	devs, err := a.discover(ctx, lib)
	if err != nil || ctx.Err() != nil {
		return err
	}
	devs, err = a.cfg.Excluded(devs)
	if err != nil {
		return err
	}
	a.setNotReady("waiting for this node's pods to sync")
	cache, err := podwatch.New(a.core, a.node)
	if err != nil {
		return err
	}
	// The informer outlives ctx until the plugin has drained: a pod bound
	// here just before "draining" must still show up, or kubelet's
	// Allocate for it waits in vain and meets a stopped plugin.
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	cache.Start(cacheCtx)
	if !cache.WaitForSync(ctx) {
		stopCache()
		return nil
	}
	scaling := inventory.Scaling{Split: a.cfg.Split, Memory: a.cfg.MemoryScaling, Cores: a.cfg.CoreScaling}
	inv := inventory.Build(devs, scaling, nil)
	gpus := make([]plugin.GPU, len(devs))
	uuids := make([]string, len(devs))
	for i, d := range devs {
		// The advertised (scaled) memory bounds every slice of the GPU.
		gpus[i], uuids[i] = plugin.GPU{UUID: d.UUID, NUMA: d.NUMA, MemoryMiB: inv.GPUs[i].MemoryMiB}, d.UUID
	}
	p := plugin.New(plugin.Options{
		Node: a.node, Resources: a.resources, Split: a.cfg.Split,
		Oversubscribe: a.cfg.MemoryScaling > 1, Interposer: a.cfg.Interposer, ResolveWait: a.cfg.ResolveWait,
	}, gpus, cache, podwatch.NewPhaseWriter(a.core), a.metrics, a.log.With("component", "plugin"))
	pub := inventory.NewPublisher(a.core, a.node)
	server := plugin.NewServer(p, a.cfg.PluginDir, a.cfg.PluginSocket, pub, a.log.With("component", "plugin"))
	if a.cfg.PodResourcesSocket != "" && a.cfg.Pod != "" {
		server.AwaitKubeletPods(a.cfg.Pod, func(ctx context.Context) ([]string, error) {
			return kubeletapi.ListPods(ctx, a.cfg.PodResourcesSocket)
		})
	}
	a.mu.Lock()
	a.server, a.podCache, a.notReady = server, cache, ""
	a.inv = inv
	a.mu.Unlock()
	a.metrics.Health(uuids, nil)

	healthChanged := make(chan protocol.Inventory, 1)
	onHealth := func(unhealthy map[string]bool) {
		p.SetUnhealthy(unhealthy)
		a.metrics.Health(uuids, unhealthy)
		inv := inventory.Build(devs, scaling, unhealthy)
		a.mu.Lock()
		a.inv = inv
		a.mu.Unlock()
		// Keep only the newest inventory for the publisher.
		select {
		case <-healthChanged:
		default:
		}
		healthChanged <- inv
	}
	watcher := health.NewWatcher(lib, uuids, health.NewTracker(a.cfg.IgnoredXIDs, a.cfg.HealthRecovery), onHealth, a.log.With("component", "health"))
	g.Go(func() error { return watcher.Run(ctx) })
	g.Go(func() error {
		defer stopCache()
		return server.Run(ctx)
	})
	g.Go(func() error { return a.publish(ctx, pub, healthChanged) })
	if a.cfg.PodResourcesSocket != "" {
		events := record.NewBroadcaster()
		events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.core.Events("")})
		rec := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vgpud", Host: a.node})
		check := plugin.PodResourcesCheck{
			Node: a.node, Socket: a.cfg.PodResourcesSocket, Resource: a.resources.GPU, Pods: cache, Period: 10 * time.Second,
			Report: func(m plugin.Mismatch) {
				a.metrics.PodResourcesMismatch()
				rec.Event(m.Pod, corev1.EventTypeWarning, "DevicesDisagree", m.Message)
			},
			Log: a.log.With("component", "podresources"),
		}
		g.Go(func() error {
			defer events.Shutdown()
			return check.Run(ctx)
		})
	}
	a.log.Info("node role serving", "node", a.node, "gpus", len(devs), "split", a.cfg.Split, "backend", a.cfg.Backend)
	return nil
}

// discover retries every 30 s until NVML answers, so a pod started
// before the driver picks it up later.
func (a *Agent) discover(ctx context.Context, lib nvml.Interface) ([]gpu.Device, error) {
	for {
		devs, err := gpu.Discover(lib)
		if err == nil {
			return devs, nil
		}
		a.setNotReady(err.Error())
		a.log.Error("GPU discovery failed; retrying in 30s", "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(30 * time.Second):
		}
	}
}

// publish writes the inventory annotation at start and whenever health
// changes it, retrying failed writes.
func (a *Agent) publish(ctx context.Context, pub *inventory.Publisher, changed <-chan protocol.Inventory) error {
	a.mu.Lock()
	inv := a.inv
	a.mu.Unlock()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case inv = <-changed:
		case <-retry.C:
		}
		wrote, err := pub.Publish(ctx, inv)
		if err != nil {
			a.log.Error("publish GPU inventory; retrying in 5s", "err", err)
			retry.Reset(5 * time.Second)
			continue
		}
		if wrote {
			unhealthy := 0
			for _, g := range inv.GPUs {
				if !g.Healthy {
					unhealthy++
				}
			}
			a.log.Info("GPU inventory published", "node", a.node, "gpus", len(inv.GPUs), "unhealthy", unhealthy)
		}
	}
}

func (a *Agent) setNotReady(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notReady = why
}

func (a *Agent) snapshot() inspect.Snapshot {
	ready, why := a.Ready()
	a.mu.Lock()
	inv, server, cache := a.inv, a.server, a.podCache
	a.mu.Unlock()
	s := inspect.Snapshot{Node: a.node, Backend: a.cfg.Backend, Ready: ready, NotReady: why, Role: a.role, Taken: time.Now(), GPUs: []inspect.GPU{}, Allocations: []inspect.Allocation{}}
	if a.leader != nil {
		s.Leader, s.IsLeader = a.leader.Leader(), a.leader.IsLeader()
	}
	if cache != nil {
		s.GPUs, s.Allocations = inspect.Usage(a.node, inv, cache.List())
	}
	if server != nil {
		r := server.Registration()
		s.Registration = inspect.Registration{Count: r.Count, Last: r.Last, LatencyMs: float64(r.Latency.Microseconds()) / 1000, Trigger: r.Trigger, Error: r.Error}
	}
	return s
}
