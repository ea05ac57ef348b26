package nrihook

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
)

// PluginName is the name vgpud registers with the runtime; the runtime's
// NRI validator lists it in required_plugins so that no container is
// created without vgpud's word on its GPUs.
const PluginName = "vgpud"

// drainMax bounds how long stopping waits for the call being answered
// (the runtime gives one 2 s).
const drainMax = 3 * time.Second

// replyGrace is how long the drained hook stays connected, refusing
// every call, before it closes. A call leaves the count before ttrpc has
// written its reply, and the runtime creates the container of a call
// whose connection closed before the reply unadjusted, vgpud listed as
// consulted (NRI takes a closed plugin's call as no answer): so the
// replies of the last call answered, and of those refused while
// stopping, get this long to reach the runtime.
const replyGrace = 500 * time.Millisecond

// pluginIndex orders vgpud among NRI plugins: late, so what vgpud sets
// about GPUs is what stays.
const pluginIndex = "90"

// Run connects to the runtime's NRI socket and serves it until ctx ends,
// connecting again whenever the runtime restarts.
//
// The runtime creates a container without the hook's adjustment when the
// connection closes during a call, and its validator lets that pass: so
// the hook stops by refusing new calls and letting the one being answered
// finish, and only once their replies have had replyGrace to go out
// closes the connection. After that the validator refuses what needs the
// hook.
func (h *Hook) Run(parent context.Context, socket string) error {
	// The connection lives on ctx, which ends only once the hook has
	// drained after parent ends (or when Run returns).
	ctx, stop := context.WithCancel(context.WithoutCancel(parent))
	defer stop()
	go func() {
		select {
		case <-parent.Done():
			h.drain(drainMax)
			if up, _ := h.Connected(); up {
				<-h.clock.After(replyGrace)
			}
			stop()
		case <-ctx.Done():
		}
	}()
	backoff := 200 * time.Millisecond
	for !h.stopping() {
		s, err := stub.New(h, stub.WithPluginName(PluginName), stub.WithPluginIdx(pluginIndex), stub.WithSocketPath(socket),
			stub.WithLogger(logger{h.log}), stub.WithOnClose(h.setDown))
		if err != nil {
			return fmt.Errorf("NRI plugin: %w", err)
		}
		began := h.clock.Now()
		err = s.Run(ctx)
		h.setDown()
		// Draining: a new connection would only refuse, and its close
		// would open NRI's gap again (a closed plugin is still called
		// until the runtime's next event, its call taken as answered).
		if ctx.Err() != nil || h.stopping() {
			return nil
		}
		if h.clock.Since(began) > 10*time.Second {
			backoff = 200 * time.Millisecond
		}
		h.log.Warn("container runtime connection ended; connecting again", "socket", socket, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-h.clock.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// logger sends NRI's own log lines to slog, at debug below warnings.
type logger struct{ l *slog.Logger }

var _ nrilog.Logger = logger{}

func (g logger) Debugf(ctx context.Context, f string, a ...any) {
	g.l.DebugContext(ctx, fmt.Sprintf(f, a...))
}
func (g logger) Infof(ctx context.Context, f string, a ...any) {
	g.l.DebugContext(ctx, fmt.Sprintf(f, a...))
}
func (g logger) Warnf(ctx context.Context, f string, a ...any) {
	g.l.WarnContext(ctx, fmt.Sprintf(f, a...))
}
func (g logger) Errorf(ctx context.Context, f string, a ...any) {
	g.l.ErrorContext(ctx, fmt.Sprintf(f, a...))
}
