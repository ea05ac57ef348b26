// Package runtimecheck is the node's preflight, kept current: whether its
// container runtime fails closed without vgpud, read from the runtime's
// configuration every minute, shown by inspect and --cluster, exported
// as a metric and alerted on; and `vgpud preflight`, the same reading
// once.
package runtimecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// runtimeCheckPeriod is how often the node reads its runtime's
// configuration again: a node set up by hand, or reverted, shows within
// a minute.
const runtimeCheckPeriod = time.Minute

// Preflight reads the runtime configuration that o names and judges it
// for vgpud's hook on nriSocket, as `vgpud preflight` and the node role
// do. ok is false when o names none.
func Preflight(o Options, nriSocket string) (v preflight.Verdict, ok bool) {
	spec, err := preflight.ParseSpec(o.RuntimeConfig)
	if err != nil || spec.Runtime == "" {
		return preflight.Verdict{}, false
	}
	return spec.Check(Want(nriSocket)), true
}

// Want is what vgpud's settings ask of the runtime, its hook on socket.
func Want(socket string) preflight.Want {
	return preflight.Want{Plugin: nrihook.PluginName, Tolerate: wellknown.AnnotationHookOptional, Socket: socket}
}

// Metrics take each verdict.
type Metrics interface {
	RuntimeFailsClosed(closed bool)
}

// Check is the node's preflight, kept current.
type Check struct {
	opts    Options
	socket  string // the NRI socket vgpud's hook expects
	core    typedcorev1.NodesGetter
	node    string
	metrics Metrics
	clock   clock.WithTicker
	log     *slog.Logger
	// busy is set while a reading of the runtime's files runs.
	busy atomic.Bool

	mu     sync.Mutex
	latest *preflight.Verdict // nil before one
}

// New returns the check for node, with vgpud's hook on nriSocket,
// writing its verdict there through core.
func New(opts Options, nriSocket string, core typedcorev1.NodesGetter, node string, metrics Metrics, clk clock.WithTicker, log *slog.Logger) *Check {
	return &Check{opts: opts, socket: nriSocket, core: core, node: node, metrics: metrics, clock: clk, log: log}
}

// Latest is the latest verdict; nil before one.
func (c *Check) Latest() *preflight.Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest
}

// preflightTimeout bounds one reading of the runtime's files: a file that
// blocks (a mount gone away) must not freeze the verdict at its last
// value.
const preflightTimeout = 10 * time.Second

// timedPreflight is Preflight within preflightTimeout; a reading that
// takes longer is Unknown, and the next one starts only once it ends.
func (c *Check) timedPreflight() preflight.Verdict {
	if c.busy.Load() {
		return preflight.Verdict{Result: preflight.Unknown, Problems: []string{"the previous reading of the runtime's configuration has not ended: a file blocks"}}
	}
	done := make(chan preflight.Verdict, 1)
	c.busy.Store(true)
	go func() {
		defer c.busy.Store(false)
		v, _ := Preflight(c.opts, c.socket)
		done <- v
	}()
	select {
	case v := <-done:
		return v
	case <-c.clock.After(preflightTimeout):
		return preflight.Verdict{Result: preflight.Unknown, Problems: []string{fmt.Sprintf("reading the runtime's configuration took over %s: a file blocks", preflightTimeout)}}
	}
}

// Run runs the preflight until ctx ends and publishes each new
// verdict: the log, the metric, the inspect view and the node's
// vgpud.io/runtime-check annotation. A failed write is retried at the next
// check; nothing else waits on it.
func (c *Check) Run(ctx context.Context) error {
	pub := inventory.NewPublisher(c.core, c.node)
	var said, written string
	t := c.clock.NewTicker(runtimeCheckPeriod)
	defer t.Stop()
	if c.opts.RuntimeConfig == "" {
		// Turned off: no verdict from an earlier run stays on the node.
		if err := pub.ClearRuntime(ctx); err != nil {
			c.log.Warn("remove the node's runtime check, turned off", "err", err)
		}
		return nil
	}
	for {
		v := c.timedPreflight()
		if n, err := c.core.Nodes().Get(ctx, c.node, metav1.GetOptions{}); err == nil {
			v = preflight.WithRuntimeVersion(v, n.Status.NodeInfo.ContainerRuntimeVersion)
		}
		c.metrics.RuntimeFailsClosed(v.Closed())
		c.mu.Lock()
		c.latest = &v
		c.mu.Unlock()
		raw, err := encodeRuntime(v)
		if err != nil {
			return err
		}
		if raw != said {
			said = raw
			if v.Closed() && len(v.Problems) == 0 {
				c.log.Info("the container runtime fails closed without vgpud", "runtime", v.Runtime, "files", v.Files)
			} else {
				c.log.Warn("the container runtime's configuration needs a change", "result", v.Result, "runtime", v.Runtime, "files", v.Files, "problems", v.Problems)
			}
		}
		if raw != written {
			if err := pub.SetRuntime(ctx, raw); err != nil {
				c.log.Warn("write the runtime check to the node; retrying in a minute", "err", err)
			} else {
				written = raw
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// encodeRuntime is the vgpud.io/runtime-check annotation's value: the verdict
// without the file list, its problems bounded, so that a configuration
// cannot make the node's object large.
func encodeRuntime(v preflight.Verdict) (string, error) {
	const maxProblems, maxLen = 4, 400
	p := slices.Clone(v.Problems)
	if len(p) > maxProblems {
		p = append(p[:maxProblems], fmt.Sprintf("and %d more: vgpud preflight", len(v.Problems)-maxProblems))
	}
	for i, s := range p {
		if len(s) > maxLen {
			p[i] = strings.ToValidUTF8(s[:maxLen], "") + "…"
		}
	}
	b, err := json.Marshal(protocol.RuntimeCheck{Result: v.Result, Runtime: v.Runtime, Scope: v.Scope, Problems: p})
	if err != nil {
		return "", fmt.Errorf("encode the runtime check: %w", err)
	}
	return string(b), nil
}
