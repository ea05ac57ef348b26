package node

// The node's preflight, kept current: whether its container runtime
// fails closed without vgpud, read from the runtime's configuration
// every minute, shown by inspect and --cluster, exported as a metric
// and alerted on.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol"
)

// runtimeCheckPeriod is how often the node reads its runtime's
// configuration again: a node set up by hand, or reverted, shows within
// a minute.
const runtimeCheckPeriod = time.Minute

// Preflight reads the runtime configuration that cfg names and judges
// it, as `vgpud preflight` and the node role do. ok is false when cfg
// names none.
func Preflight(cfg Config) (v preflight.Verdict, ok bool) {
	spec, err := preflight.ParseSpec(cfg.RuntimeConfig)
	if err != nil || spec.Runtime == "" {
		return preflight.Verdict{}, false
	}
	return spec.Check(want(cfg)), true
}

// want is what vgpud's settings ask of the runtime.
func want(cfg Config) preflight.Want {
	return preflight.Want{Plugin: nrihook.PluginName, Tolerate: protocol.AnnotationHookOptional, Socket: cfg.NRISocket}
}

// preflightTimeout bounds one reading of the runtime's files: a file that
// blocks (a mount gone away) must not freeze the verdict at its last
// value.
const preflightTimeout = 10 * time.Second

// timedPreflight is Preflight within preflightTimeout; a reading that
// takes longer is Unknown, and the next one starts only once it ends.
func (a *Role) timedPreflight() preflight.Verdict {
	if a.preflightBusy.Load() {
		return preflight.Verdict{Result: preflight.Unknown, Problems: []string{"the previous reading of the runtime's configuration has not ended: a file blocks"}}
	}
	done := make(chan preflight.Verdict, 1)
	a.preflightBusy.Store(true)
	go func() {
		defer a.preflightBusy.Store(false)
		v, _ := Preflight(a.cfg)
		done <- v
	}()
	select {
	case v := <-done:
		return v
	case <-a.clock.After(preflightTimeout):
		return preflight.Verdict{Result: preflight.Unknown, Problems: []string{fmt.Sprintf("reading the runtime's configuration took over %s: a file blocks", preflightTimeout)}}
	}
}

// checkRuntime runs the preflight until ctx ends and publishes each new
// verdict: the log, the metric, the inspect view and the node's
// vgpud.io/runtime-check annotation. A failed write is retried at the next
// check; nothing else waits on it.
func (a *Role) checkRuntime(ctx context.Context) error {
	pub := inventory.NewPublisher(a.api.Core, a.node)
	var said, written string
	t := a.clock.NewTicker(runtimeCheckPeriod)
	defer t.Stop()
	if a.cfg.RuntimeConfig == "" {
		// Turned off: no verdict from an earlier run stays on the node.
		if err := pub.ClearRuntime(ctx); err != nil {
			a.log.Warn("remove the node's runtime check, turned off", "err", err)
		}
		return nil
	}
	for {
		v := a.timedPreflight()
		a.metrics.RuntimeFailsClosed(v.Closed())
		a.mu.Lock()
		a.runtime = &v
		a.mu.Unlock()
		raw, err := encodeRuntime(v)
		if err != nil {
			return err
		}
		if raw != said {
			said = raw
			if v.Closed() && len(v.Problems) == 0 {
				a.log.Info("the container runtime fails closed without vgpud", "runtime", v.Runtime, "files", v.Files)
			} else {
				a.log.Warn("the container runtime's configuration needs a change", "result", v.Result, "runtime", v.Runtime, "files", v.Files, "problems", v.Problems)
			}
		}
		if raw != written {
			if err := pub.SetRuntime(ctx, raw); err != nil {
				a.log.Warn("write the runtime check to the node; retrying in a minute", "err", err)
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
	b, err := json.Marshal(protocol.RuntimeCheck{Result: v.Result, Runtime: v.Runtime, Problems: p})
	if err != nil {
		return "", fmt.Errorf("encode the runtime check: %w", err)
	}
	return string(b), nil
}
