package nrihook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

// pluginIndex orders vgpud among NRI plugins: late, so what vgpud sets
// about GPUs is what stays.
const pluginIndex = "90"

// Run connects to the runtime's NRI socket and serves it until ctx ends,
// connecting again whenever the runtime restarts.
//
// The runtime creates a container without the hook's adjustment when the
// connection closes during a call, and its validator lets that pass: so
// the hook stops by refusing new calls and letting the one being answered
// finish, and only then closes the connection. After that the validator
// refuses what needs the hook.
func (h *Hook) Run(ctx context.Context, socket string) error {
	// The connection lives on runCtx, which ends only once the hook has
	// drained after ctx ends (or Run returns).
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func(parent context.Context) {
		<-parent.Done()
		h.drain(drainMax)
		stop()
	}(ctx)
	ctx = runCtx
	backoff := 200 * time.Millisecond
	for {
		began := h.clock.Now()
		err := h.connectOnce(ctx, socket)
		h.setDown()
		if ctx.Err() != nil {
			return nil
		}
		var fatal *stubError
		if errors.As(err, &fatal) {
			return fatal.err
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
}

// configureWait bounds how long the runtime may take to configure the
// plugin once connected. NRI's stub waits for that without a deadline:
// a busy runtime that drops the request would keep the hook unconnected
// for good, and every container that needs it refused.
const configureWait = 20 * time.Second

// stubError is a stub that cannot be built: no retry helps.
type stubError struct{ err error }

func (e *stubError) Error() string { return e.err.Error() }

// connectOnce serves one connection to the runtime until it ends, ctx
// ends, or the runtime does not configure the plugin within
// configureWait.
func (h *Hook) connectOnce(ctx context.Context, socket string) error {
	conn, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", socket, err)
	}
	s, err := stub.New(h, stub.WithPluginName(PluginName), stub.WithPluginIdx(pluginIndex), stub.WithConnection(conn),
		stub.WithLogger(logger{h.log}), stub.WithOnClose(h.setDown))
	if err != nil {
		conn.Close()
		return &stubError{fmt.Errorf("NRI plugin: %w", err)}
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	wait := h.clock.NewTimer(configureWait)
	defer wait.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	case <-wait.C():
		if up, _ := h.Connected(); up {
			return <-done
		}
	}
	// The stub may be blocked for good waiting to be configured: closing
	// its connection makes the runtime drop it; the blocked goroutine is
	// left behind, one per such attempt.
	conn.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("the container runtime did not configure the plugin within %v", configureWait)
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
