package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/health"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/protocol/podevents"
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
	tracker := health.NewTracker(a.cfg.HealthIgnoreXIDs, a.cfg.HealthRecovery)
	for {
		changed, err := a.generation(ctx, lib, devs, present, pods, mode, tracker, events)
		if err != nil || !changed || ctx.Err() != nil {
			return err
		}
		var found []gpu.Device
		present, found, err = a.rediscover(lib)
		if err != nil {
			// A GPU added has no device node in this container, which
			// was made with the node's devices at its start: a new
			// container gets them.
			return fmt.Errorf("the node's GPUs changed, and NVML cannot describe them now (%w); exiting, so that the container starts again with the node's devices", err)
		}
		found = slices.DeleteFunc(found, func(d gpu.Device) bool {
			return slices.Contains(excluded, d.UUID) || slices.Contains(a.cfg.ExcludeGPUs, d.UUID)
		})
		uuids := make([]string, len(found))
		for i, d := range found {
			uuids[i] = d.UUID
		}
		tracker.Keep(uuids)
		a.od.Renew(lib, found)
		_, removed := diffGPUs(devs, found)
		a.metrics.ForgetGPUs(removed)
		a.reportChange(ctx, events, devs, found)
		devs = found
	}
}

// rediscover shuts NVML down, now that no part holds a handle, and
// initialises it again, which is what lists a GPU added since; the
// sampler waits meanwhile.
func (a *Role) rediscover(lib nvml.Interface) (present string, devs []gpu.Device, err error) {
	a.nvmlMu.Lock()
	defer a.nvmlMu.Unlock()
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		a.log.Warn("NVML shutdown before the rescan", "err", nvml.ErrorString(ret))
	}
	present = gpu.Present(lib)
	devs, err = gpu.Discover(lib)
	return present, devs, err
}

// generation runs the parts that serve devs until ctx ends or one fails
// (changed false), or the rescan finds the machine's GPUs changed and
// they have stopped (changed true).
func (a *Role) generation(ctx context.Context, lib nvml.Interface, devs []gpu.Device, present string, pods *nodepods.Index, mode string, tracker *health.Tracker, events podevents.Sink) (changed bool, err error) {
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(gctx)
	p := a.build(gctx, lib, devs, pods, mode, tracker)
	g.Go(func() error { return p.health.Run(gctx) })
	// The profiles' plugins stop only once the GPU resource's has
	// drained: a pod bound while it drains finds their devices too.
	pctx, pstop := context.WithCancel(context.WithoutCancel(gctx))
	defer pstop()
	g.Go(func() error {
		defer pstop()
		return p.server.Run(gctx)
	})
	if p.profiles != nil {
		g.Go(func() error { return p.profiles.Run(pctx) })
	}
	g.Go(func() error { return a.publish(gctx, p.publisher, p.healthChanged) })
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
	if a.cfg.RescanInterval > 0 {
		g.Go(func() error {
			if a.awaitChange(gctx, lib, present, devs) {
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

// awaitChange compares the machine's GPUs with present, and the MIG
// instances of those served (devs) with what was discovered, every
// RescanInterval, and reports true once either differs; false when ctx
// ends.
func (a *Role) awaitChange(ctx context.Context, lib nvml.Interface, present string, devs []gpu.Device) bool {
	// Instances the node makes on demand come and go with its pods:
	// only others' are a change.
	layout := gpu.LayoutOf(devs, a.od.AsDiscovered())
	unread := false // said once until read again
	for {
		select {
		case <-ctx.Done():
			return false
		case <-a.clock.After(a.cfg.RescanInterval):
		}
		if now := gpu.Present(lib); now != present {
			a.log.Info("the node's GPUs changed; rescanning", "was", present, "now", now)
			return true
		}
		var now string
		var ok bool
		a.nvmlMu.RLock()
		a.od.Quiet(func() { now, ok = gpu.Layout(lib, devs, a.od) })
		a.nvmlMu.RUnlock()
		if !ok && !unread {
			a.log.Warn("the node's MIG instances could not be read; a change to them is seen once they can be")
		}
		unread = !ok
		if ok && now != layout {
			a.log.Info("the node's MIG instances changed; rescanning", "was", layout, "now", now)
			return true
		}
	}
}

// reportChange logs and records on the Node which GPUs came and went.
func (a *Role) reportChange(ctx context.Context, events podevents.Sink, was, now []gpu.Device) {
	added, removed := diffGPUs(was, now)
	if len(added) == 0 && len(removed) == 0 {
		a.log.Info("GPUs rescanned: the same GPUs", "gpus", len(now))
		return
	}
	msg := fmt.Sprintf("%d GPU(s) now", len(now))
	if len(removed) > 0 {
		msg += "; gone: " + strings.Join(removed, ", ") + " (pods still assigned one keep running without it; the leader places nothing more there)"
	}
	if len(added) > 0 {
		msg += "; added: " + strings.Join(added, ", ")
	}
	a.log.Warn("GPUs came or went", "node", a.node, "added", added, "removed", removed, "gpus", len(now))
	eventType := corev1.EventTypeNormal
	if len(removed) > 0 {
		eventType = corev1.EventTypeWarning
	}
	ref := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.node}}
	if n, err := a.api.Core.Nodes().Get(ctx, a.node, metav1.GetOptions{}); err == nil {
		ref.UID = n.UID // so that kubectl describe node shows it
	}
	events.About(eventType, "Rescanning")(ref, "GPUsChanged", msg)
}

// diffGPUs is which GPUs (by UUID) are in now but not in was, and the
// reverse.
func diffGPUs(was, now []gpu.Device) (added, removed []string) {
	in := func(devs []gpu.Device, uuid string) bool {
		for _, d := range devs {
			if d.UUID == uuid {
				return true
			}
		}
		return false
	}
	for _, d := range now {
		if !in(was, d.UUID) {
			added = append(added, d.UUID)
		}
	}
	for _, d := range was {
		if !in(now, d.UUID) {
			removed = append(removed, d.UUID)
		}
	}
	return added, removed
}
