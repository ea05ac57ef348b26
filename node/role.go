package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node/internal/cordon"
	"github.com/vgpud/vgpud/node/internal/deviceplugin"
	"github.com/vgpud/vgpud/node/internal/dra"
	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/gpuagents"
	"github.com/vgpud/vgpud/node/internal/gpuuse"
	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/node/internal/identity"
	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/migondemand"
	"github.com/vgpud/vgpud/node/internal/nodemetrics"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/rescan"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// LeaderStatus says who leads; the cluster role's elector satisfies it, or
// a Lease reader when this replica runs the node role alone.
type LeaderStatus interface {
	Leader() string
	IsLeader() bool
}

// Metrics are the node's metrics as the role feeds them.
type Metrics interface {
	deviceplugin.PluginObserver
	nrihook.HookObserver
	Identity(mode string)
	RuntimeFailsClosed(closed bool)
	Health(uuids []string, unhealthy map[string]bool)
	ForgetGPUs(uuids []string)
	PodResourcesMismatch()
	SampleGPUs(sample func() []gpu.UtilSample)
	ReportUsage(last func() usage.Outcome)
	Killed(k usage.Kill)
	Sampled(took time.Duration)
	KillsFrom0(namespace, pod, container, uuid string)
	ForgetPod(namespace, pod string)
}

// API is what the node role calls: core/v1 (its node's inventory
// annotation, its pods and their phase) and Events.
type API struct {
	Core   typedcorev1.CoreV1Interface
	Events eventsv1client.EventsV1Interface
	// Kube is every group, for the DRA driver's kubelet plugin, which
	// reads claims and writes the node's ResourceSlices.
	Kube kubernetes.Interface
}

// Role is the node role of one replica.
type Role struct {
	cfg       Config
	node      string
	resources wellknown.ResourceNames
	api       API
	leader    LeaderStatus
	role      string
	metrics   Metrics
	clock     clock.WithTicker
	log       *slog.Logger

	mu       sync.Mutex
	notReady string
	inv      protocol.Inventory
	invReady bool // the GPUs were discovered at least once
	server   *deviceplugin.PluginServer
	podCache *nodepods.Index
	hook     *nrihook.Hook // nil where the node guesses
	// claims is the DRA driver where the node serves claims (--dra),
	// in place of the device plugin; nil elsewhere. kept is the driver
	// of a node that no longer serves claims, answering for those it
	// prepared before until their pods end (keepClaims); nil where it
	// prepared none.
	claims, kept *dra.ClaimDriver
	// claimsRead: the prepare record was read, and claims or kept set
	// where it says so; until then the hook cannot resolve a claim.
	claimsRead bool
	// agents says which pods are GPU agents, for the hook.
	agents gpuagents.Rule
	cordon *cordon.Watch // the node's GPU cordon, for inspect
	// runtime reads the runtime's configuration every minute.
	runtime *runtimecheck.Check
	// use samples the GPUs' processes against the hook's grants.
	use *gpuuse.Monitor
	// nvmlMu is held for writing while a rescan shuts NVML down and
	// discovers again; what uses NVML outside a generation (the metrics
	// sampler) reads under it.
	nvmlMu sync.RWMutex
	// od makes MIG instances on demand; nil where the node makes none.
	// Set before the first generation, read-only after.
	od *migondemand.Instances
	// record is the MIG record's lock; nil where nothing is made.
	record *migondemand.RecordLock
	// recordWait is how long the start waits for it.
	recordWait time.Duration
}

// NewRole returns the node role for nodeName; role names what this replica
// runs, for inspect. clk times every wait, retry and timeout of the role
// and its parts.
func NewRole(cfg Config, nodeName string, resources wellknown.ResourceNames, api API, leader LeaderStatus, role string,
	reg prometheus.Registerer, clk clock.WithTicker, log *slog.Logger) *Role {
	metrics := nodemetrics.New(reg)
	use := gpuuse.New(nodeName, metrics, clk, log)
	return &Role{cfg: cfg, node: nodeName, resources: resources, api: api, leader: leader, role: role, metrics: metrics, clock: clk, log: log, notReady: "starting", use: use, recordWait: migondemand.RecordWait,
		cordon:  cordon.New(api.Core, nodeName, log),
		runtime: runtimecheck.New(cfg.Runtime, cfg.Identity.NRISocket, api.Core, nodeName, metrics, clk, log)}
}

// Ready reports whether the plugin is registered with kubelet, and why not.
func (a *Role) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.notReady != "" {
		return false, a.notReady
	}
	switch {
	case a.claims != nil:
		if ok, err := a.claims.Registered(); !ok {
			return false, "DRA driver " + wellknown.DRADriver + " not registered with kubelet yet: " + err.Error()
		}
	case a.server == nil:
		return false, "device plugin not started"
	case a.server.Registration().Count == 0:
		return false, "device plugin not registered with kubelet yet"
	}
	if a.hook != nil {
		if up, _ := a.hook.Connected(); !up {
			return false, "NRI hook not connected to the container runtime at " + a.cfg.Identity.NRISocket
		}
	}
	return true, ""
}

// Run runs the node role until ctx ends. Settings that cannot work (bad
// overrides, a missing interposer, an exclusion matching no GPU) end it
// with an error; a missing driver is retried, with the reason shown by
// inspect and in the log.
func (a *Role) Run(ctx context.Context) error {
	// The overrides that need no API are read at once. An entry chosen by
	// label waits for the node's labels, after the hook has connected.
	cfg, err := a.cfg.ForNode(a.node, nil)
	byLabel := errors.Is(err, configapi.ErrNeedsLabels)
	if err != nil && !byLabel {
		return err
	}
	if !byLabel {
		a.cfg = cfg
	}
	if a.cfg.Slices.InterposerDir != "" {
		if err := grant.PrepareInterposer(a.cfg.Slices.InterposerDir); err != nil {
			return err
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.runtime.Run(ctx) })
	g.Go(func() error { return a.cordon.Run(ctx) })
	pods, err := nodepods.New(a.api.Core, a.node)
	if err != nil {
		return err
	}
	agentNamespaces, err := gpuagents.NewNamespaces(a.api.Core, a.log.With("component", "gpu-agents"))
	if err != nil {
		return err
	}
	agentNamespaces.Start(ctx)
	a.agents = gpuagents.Rule{Accounts: a.cfg.Identity.GPUAgentAccounts, Namespaces: agentNamespaces}
	// The informer outlives ctx until the plugin has drained: a pod bound
	// here just before "draining" must still show up, or kubelet's
	// Allocate for it waits in vain and meets a stopped plugin.
	podsCtx, stopPods := context.WithCancel(context.WithoutCancel(ctx))
	pods.Start(podsCtx)
	// The hook connects before anything else, the GPUs and the API
	// included: after a reboot the runtime creates no container on this
	// node without it, the network's and the GPU driver's among them.
	mode := identity.Mode(a.cfg.Identity.NRISocket, a.log)
	socket := a.cfg.Identity.NRISocket
	var hook *nrihook.Hook
	if mode == wellknown.IdentityRuntime {
		hook = identity.NewHook(a.hookOptions(), pods, a.use.Granted(), a.metrics, a.clock, a.log)
		if byLabel {
			hook.Hold("is reading its node's labels for the per-node overrides")
		}
		a.mu.Lock()
		a.hook = hook
		a.mu.Unlock()
		g.Go(func() error { return hook.Run(ctx, socket) })
	} else {
		g.Go(func() error { return identity.WatchForNRI(ctx, socket, a.clock) })
	}
	g.Go(func() error {
		started := false
		defer func() {
			if !started {
				stopPods()
			}
		}()
		if byLabel {
			// Nothing running reads a.cfg yet but the hook, which has
			// its own copy of what it needs.
			cfg, err := a.cfg.ForNode(a.node, func() (map[string]string, error) { return a.nodeLabels(ctx) })
			if err != nil {
				return err
			}
			a.cfg = cfg
			if hook != nil {
				hook.Settle(a.sliceOptions())
			}
		}
		// The settings are the node's now, its overrides read.
		a.use.Configure(a.cfg.Usage, mode == wellknown.IdentityRuntime)
		var err error
		started, err = a.start(ctx, g, pods, stopPods, mode)
		return err
	})
	return g.Wait()
}

// start opens the GPU backend and serves inspect, then serves the GPUs
// (serve); started says whether the plugin took over stopping the pod
// informer.
func (a *Role) start(ctx context.Context, g *errgroup.Group, pods *nodepods.Index, stopPods func(), mode string) (started bool, err error) {
	lib, err := gpu.Open(a.cfg.GPUs.GPUBackend, a.node)
	if err != nil {
		return false, err
	}
	a.metrics.SampleGPUs(func() []gpu.UtilSample {
		a.nvmlMu.RLock()
		defer a.nvmlMu.RUnlock()
		return gpu.Samples(lib)
	})
	var mock inspect.MockControl
	if m, ok := lib.(*gpu.Mock); ok {
		mock = m
	}
	g.Go(func() error {
		return inspect.Serve(ctx, a.cfg.Inspect.InspectSocket, a.snapshot, mock, a.log.With("component", "inspect"))
	})
	if a.cfg.Slices.InterposerDir != "" {
		// Also where the runtime names pods: directories the guessing
		// path (or an older vgpud) left behind.
		g.Go(func() error { grant.Sweep(ctx, a.cfg.Slices.InterposerDir, pods, a.clock, a.log); return nil })
	}
	return a.serve(ctx, g, lib, pods, stopPods, mode)
}

// serve discovers the GPUs (retrying without a driver), then builds the
// parts that need them and runs them in g; started says whether the
// plugin took over stopping the pod informer.
func (a *Role) serve(ctx context.Context, g *errgroup.Group, lib nvml.Interface, pods *nodepods.Index, stopPods func(), mode string) (started bool, err error) {
	if a.record, err = migondemand.LockRecord(ctx, a.cfg.MIG, a.recordWait, a.clock, a.log, a.setNotReady); err != nil || ctx.Err() != nil {
		return false, err
	}
	defer func() {
		if !started {
			a.record.Release()
		}
	}()
	if m, ok := lib.(*gpu.Mock); ok {
		// Under the lock: the instances the replaced pod's mock made
		// in its last pass are in the file by then.
		if err := migondemand.KeepMock(a.cfg.MIG, a.node, m); err != nil {
			return false, err
		}
		if err := a.use.KeepMockProcesses(m); err != nil {
			return false, err
		}
	}
	// Taken before discovery: a GPU that comes or goes in between makes
	// the first rescan look again, rather than go unseen.
	present := gpu.Present(lib)
	devs, err := a.discover(ctx, lib)
	if err != nil || ctx.Err() != nil {
		return false, err
	}
	all := devs
	if devs, err = a.cfg.GPUs.Excluded(all); err != nil {
		return false, err
	}
	// Excluded by UUID from now on: NVML renumbers GPUs when one comes
	// or goes, and an index would then name another.
	excluded, _ := rescan.Diff(devs, all)
	if a.od, err = migondemand.Open(a.cfg.MIG, lib, devs, mode, a.log); err != nil {
		return false, err
	}
	a.setNotReady("waiting for this node's pods to sync")
	if !pods.WaitForSync(ctx) {
		return false, nil
	}
	if a.od.Making() {
		// It hands out nothing before the maker's first pass has
		// checked the record against the GPUs (migmaker.Maker.Made).
		// Not under a.mu: the hook judges the containers it found running
		// on made instances now, which reads the inventory (CDI names).
		a.mu.Lock()
		hook := a.hook
		a.mu.Unlock()
		if hook != nil {
			hook.SetMaker(a.od.Maker())
		}
	}
	a.metrics.Identity(mode)
	if err := identity.Announce(ctx, a.api.Core, a.node, mode, a.clock, a.log); err != nil || ctx.Err() != nil {
		return false, err
	}
	if a.cfg.DRA.DRA {
		if err := a.startClaims(ctx); err != nil {
			return false, err
		}
	} else if a.api.Kube != nil {
		// Off the start's path: the device plugin registers meanwhile.
		g.Go(func() error { a.withdrawClaims(ctx); return nil })
		if err := a.keepClaims(ctx); err != nil {
			return false, err
		}
	}
	a.mu.Lock()
	a.claimsRead = true
	a.mu.Unlock()
	g.Go(func() error {
		defer stopPods()
		defer a.record.Release() // after the maker's last pass
		return a.generations(ctx, lib, devs, excluded, present, pods, mode)
	})
	a.log.Info("node role serving", "node", a.node, "gpus", len(devs), "split", a.cfg.Sharing.Split, "backend", a.cfg.GPUs.GPUBackend, "identity", mode)
	return true, nil
}

// discover retries every 30 s until NVML answers, so a pod started
// before the driver picks it up later.
func (a *Role) discover(ctx context.Context, lib nvml.Interface) ([]gpu.Device, error) {
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
		case <-a.clock.After(30 * time.Second):
		}
	}
}

// sliceOptions are the node's settings that shape every slice it grants.
func (a *Role) sliceOptions() grant.Shape {
	return grant.Shape{Oversubscribe: a.cfg.Sharing.MemoryScaling > 1, Interposer: a.cfg.Slices.InterposerDir}
}
