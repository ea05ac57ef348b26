// Package rescan finds GPUs that come and go, and MIG instances others
// make or destroy: it compares the machine with what the node serves
// every interval, shuts NVML down and discovers again once no part
// holds a handle, and says on the Node what changed. The node role runs
// one generation of its parts per answer.
package rescan

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol/podevents"
)

// Ours are the MIG instances the node makes itself
// (migondemand.Instances): their coming and going is no change.
type Ours interface {
	gpu.Own
	AsDiscovered() gpu.Own
	Quiet(f func())
}

// Scanner looks at one node's GPUs through lib.
type Scanner struct {
	lib      nvml.Interface
	interval time.Duration
	ours     Ours
	// nvml is held for writing while NVML is shut down and initialised
	// again; readers of NVML outside a generation hold it for reading.
	nvml  *sync.RWMutex
	nodes typedcorev1.NodesGetter
	node  string
	clock clock.Clock
	log   *slog.Logger
}

// New returns the scanner of node's GPUs, looking every interval.
func New(lib nvml.Interface, interval time.Duration, ours Ours, nvml *sync.RWMutex, nodes typedcorev1.NodesGetter, node string, clk clock.Clock, log *slog.Logger) *Scanner {
	return &Scanner{lib: lib, interval: interval, ours: ours, nvml: nvml, nodes: nodes, node: node, clock: clk, log: log}
}

// Rediscover shuts NVML down, now that no part holds a handle, and
// initialises it again, which is what lists a GPU added since; the
// sampler waits meanwhile.
func (s *Scanner) Rediscover() (present string, devs []gpu.Device, err error) {
	s.nvml.Lock()
	defer s.nvml.Unlock()
	lib := s.lib
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		s.log.Warn("NVML shutdown before the rescan", "err", nvml.ErrorString(ret))
	}
	present = gpu.Present(lib)
	devs, err = gpu.Discover(lib)
	return present, devs, err
}

// AwaitChange compares the machine's GPUs with present, and the MIG
// instances of those served (devs) with what was discovered, every
// interval, and reports true once either differs; false when ctx ends.
func (s *Scanner) AwaitChange(ctx context.Context, present string, devs []gpu.Device) bool {
	lib := s.lib
	// Instances the node makes on demand come and go with its pods:
	// only others' are a change.
	layout := gpu.LayoutOf(devs, s.ours.AsDiscovered())
	unread := false // said once until read again
	for {
		select {
		case <-ctx.Done():
			return false
		case <-s.clock.After(s.interval):
		}
		if now := gpu.Present(lib); now != present {
			s.log.Info("the node's GPUs changed; rescanning", "was", present, "now", now)
			return true
		}
		var now string
		var ok bool
		s.nvml.RLock()
		s.ours.Quiet(func() { now, ok = gpu.Layout(lib, devs, s.ours) })
		s.nvml.RUnlock()
		if !ok && !unread {
			s.log.Warn("the node's MIG instances could not be read; a change to them is seen once they can be")
		}
		unread = !ok
		if ok && now != layout {
			s.log.Info("the node's MIG instances changed; rescanning", "was", layout, "now", now)
			return true
		}
	}
}

// ReportChange logs and records on the Node which GPUs came and went.
func (s *Scanner) ReportChange(ctx context.Context, events podevents.Sink, was, now []gpu.Device) {
	added, removed := Diff(was, now)
	if len(added) == 0 && len(removed) == 0 {
		s.log.Info("GPUs rescanned: the same GPUs", "gpus", len(now))
		return
	}
	msg := fmt.Sprintf("%d GPU(s) now", len(now))
	if len(removed) > 0 {
		msg += "; gone: " + strings.Join(removed, ", ") + " (pods still assigned one keep running without it; the leader places nothing more there)"
	}
	if len(added) > 0 {
		msg += "; added: " + strings.Join(added, ", ")
	}
	s.log.Warn("GPUs came or went", "node", s.node, "added", added, "removed", removed, "gpus", len(now))
	eventType := corev1.EventTypeNormal
	if len(removed) > 0 {
		eventType = corev1.EventTypeWarning
	}
	ref := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.node}}
	if n, err := s.nodes.Nodes().Get(ctx, s.node, metav1.GetOptions{}); err == nil {
		ref.UID = n.UID // so that kubectl describe node shows it
	}
	events.About(eventType, "Rescanning")(ref, "GPUsChanged", msg)
}

// Diff is which GPUs (by UUID) are in now but not in was, and the
// reverse.
func Diff(was, now []gpu.Device) (added, removed []string) {
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
