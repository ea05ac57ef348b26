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

// pluginIndex orders vgpud among NRI plugins: late, so what vgpud sets
// about GPUs is what stays.
const pluginIndex = "90"

// Run connects to the runtime's NRI socket and serves it until ctx ends,
// connecting again whenever the runtime restarts.
func (h *Hook) Run(ctx context.Context, socket string) error {
	backoff := 200 * time.Millisecond
	for {
		s, err := stub.New(h, stub.WithPluginName(PluginName), stub.WithPluginIdx(pluginIndex), stub.WithSocketPath(socket),
			stub.WithLogger(logger{h.log}), stub.WithOnClose(h.setDown))
		if err != nil {
			return fmt.Errorf("NRI plugin: %w", err)
		}
		began := time.Now()
		err = s.Run(ctx)
		h.setDown()
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > 10*time.Second {
			backoff = 200 * time.Millisecond
		}
		h.log.Warn("container runtime connection ended; connecting again", "socket", socket, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
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
