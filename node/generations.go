package node

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/health"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/rescan"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podevents"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// generations serves devs, and each time a rescan finds the machine's
// GPUs changed, stops the parts that hold NVML handles (the plugin, the
// health watcher and its event set, the usage enforcer), initialises
// NVML again, discovers, and serves what is there now: kubelet gets the
// new device list from the new plugin's registration, and the leader the
// new inventory. An Event on the Node says what changed.
func (a *Role) generations(ctx context.Context, lib nvml.Interface, devs []gpu.Device, excluded []string, present string, pods *nodepods.Index, mode string) error {
	events, err := podevents.Start(ctx, a.api.Events)
	if err != nil {
		a.log.Warn("no Events for GPUs that come and go", "err", err)
	}
	defer events.Shutdown()
	tracker := health.NewTracker(a.cfg.Health.HealthIgnoreXIDs, a.cfg.Health.HealthRecovery)
	scan := rescan.New(lib, a.cfg.Rescan.RescanInterval, a.od, &a.nvmlMu, a.api.Core, a.node, a.clock, a.log)
	for {
		changed, err := a.generation(ctx, lib, devs, present, pods, mode, tracker, events, scan)
		if err != nil || !changed || ctx.Err() != nil {
			return err
		}
		var found []gpu.Device
		present, found, err = scan.Rediscover()
		if err != nil {
			// A GPU added has no device node in this container, which
			// was made with the node's devices at its start: a new
			// container gets them.
			return fmt.Errorf("the node's GPUs changed, and NVML cannot describe them now (%w); exiting, so that the container starts again with the node's devices", err)
		}
		found = slices.DeleteFunc(found, func(d gpu.Device) bool {
			return slices.Contains(excluded, d.UUID) || slices.Contains(a.cfg.GPUs.ExcludeGPUs, d.UUID)
		})
		uuids := make([]string, len(found))
		for i, d := range found {
			uuids[i] = d.UUID
		}
		tracker.Keep(uuids)
		a.od.Renew(lib, found)
		_, removed := rescan.Diff(devs, found)
		a.metrics.ForgetGPUs(removed)
		scan.ReportChange(ctx, events, devs, found)
		devs = found
	}
}

// generation runs the parts that serve devs until ctx ends or one fails
// (changed false), or the rescan finds the machine's GPUs changed and
// they have stopped (changed true).
func (a *Role) generation(ctx context.Context, lib nvml.Interface, devs []gpu.Device, present string, pods *nodepods.Index, mode string, tracker *health.Tracker, events podevents.Sink, scan *rescan.Scanner) (changed bool, err error) {
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(gctx)
	p := a.build(gctx, lib, devs, pods, mode, tracker)
	g.Go(func() error { return p.health.Run(gctx) })
	// The profiles' plugins stop only once the GPU resource's has
	// drained: a pod bound while it drains finds their devices too.
	pctx, pstop := context.WithCancel(context.WithoutCancel(gctx))
	defer pstop()
	if a.claims != nil {
		// A DRA node serves claims only: no device plugin registers, so
		// kubelet offers no GPU resource for the extender's pods here.
		pstop()
		// What the node serves, for the leader (which binds nothing
		// here) and for inspect.
		if err := p.publisher.SetPluginState(gctx, wellknown.PluginClaims); err != nil {
			a.log.Warn("could not say on the node that it serves DRA claims", "err", err)
		}
		annotated := make(chan protocol.Inventory, 1)
		g.Go(func() error { return a.serveClaims(gctx, a.inventory(), p.healthChanged, annotated, pods) })
		g.Go(func() error { return p.publisher.Keep(gctx, a.inventory(), annotated, a.clock, a.log) })
	} else {
		g.Go(func() error {
			defer pstop()
			return p.server.Run(gctx)
		})
		if p.profiles != nil {
			g.Go(func() error { return p.profiles.Run(pctx) })
		}
		g.Go(func() error { return p.publisher.Keep(gctx, a.inventory(), p.healthChanged, a.clock, a.log) })
	}
	if a.od.Making() {
		g.Go(func() error {
			return a.od.Make(gctx, a.record, pods, a.node, a.nvmlMu.RLocker(), a.clock, func() { p.republish(nil) })
		})
	}
	enforcer := a.use.NewEnforcer(lib, devs, a.od.MadeParents, pods, events)
	g.Go(func() error { return enforcer.Run(gctx) })
	g.Go(func() error { return a.use.Publish(gctx, p.publisher) })
	if p.check != nil {
		g.Go(func() error {
			defer p.events.Shutdown()
			return p.check.Run(gctx)
		})
	}
	found := make(chan struct{})
	if a.cfg.Rescan.RescanInterval > 0 {
		g.Go(func() error {
			if scan.AwaitChange(gctx, present, devs) {
				close(found)
				stop()
			}
			return nil
		})
	}
	err = g.Wait()
	select {
	case <-found:
		return ctx.Err() == nil, nil
	default:
		return false, err
	}
}
