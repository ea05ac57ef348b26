package node

import (
	"context"
	"fmt"
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
func (a *Role) generations(ctx context.Context, lib nvml.Interface, devs []gpu.Device, present string, pods *nodepods.Index, mode string) error {
	events, err := podevents.Start(ctx, a.api.Events)
	if err != nil {
		a.log.Warn("no Events for GPUs that come and go", "err", err)
	}
	defer events.Shutdown()
	tracker := health.NewTracker(a.cfg.HealthIgnoreXIDs, a.cfg.HealthRecovery)
	for {
		changed, err := a.generation(ctx, lib, devs, present, pods, mode, tracker)
		if err != nil || !changed || ctx.Err() != nil {
			return err
		}
		// Every handle of the last generation is released: NVML may be
		// initialised again, which is what lists a GPU added since.
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			a.log.Warn("NVML shutdown before the rescan", "err", nvml.ErrorString(ret))
		}
		present = gpu.Present(lib)
		found, err := a.discover(ctx, lib)
		if err != nil || ctx.Err() != nil {
			return err
		}
		found, unmatched := a.cfg.exclude(found)
		if len(unmatched) > 0 {
			a.log.Warn("excluded GPUs not on the node any more", "exclude", unmatched)
		}
		a.reportChange(events, devs, found)
		devs = found
	}
}

// generation runs the parts that serve devs until ctx ends or one fails
// (changed false), or the rescan finds the machine's GPUs changed and
// they have stopped (changed true).
func (a *Role) generation(ctx context.Context, lib nvml.Interface, devs []gpu.Device, present string, pods *nodepods.Index, mode string, tracker *health.Tracker) (changed bool, err error) {
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(gctx)
	p := a.build(gctx, lib, devs, pods, mode, tracker)
	g.Go(func() error { return p.health.Run(gctx) })
	g.Go(func() error { return p.server.Run(gctx) })
	g.Go(func() error { return a.publish(gctx, p.publisher, p.healthChanged) })
	enforcer := a.newEnforcer(gctx, lib, devs, pods)
	g.Go(func() error { return enforcer.Run(gctx) })
	g.Go(func() error { return a.publishUse(gctx, p.publisher) })
	if p.check != nil {
		g.Go(func() error {
			defer p.events.Shutdown()
			return p.check.Run(gctx)
		})
	}
	found := make(chan struct{})
	if a.cfg.RescanInterval > 0 {
		g.Go(func() error {
			if a.awaitChange(gctx, lib, present) {
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

// awaitChange compares the machine's GPUs with present every
// RescanInterval, and reports true once they differ; false when ctx ends.
func (a *Role) awaitChange(ctx context.Context, lib nvml.Interface, present string) bool {
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
	}
}

// reportChange logs and records on the Node which GPUs came and went.
func (a *Role) reportChange(events podevents.Sink, was, now []gpu.Device) {
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
	events.About(eventType, "Rescanning")(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.node}}, "GPUsChanged", msg)
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
