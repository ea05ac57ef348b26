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

// pluginIndex orders vgpud among NRI plugins: late, so what vgpud sets
// about GPUs is what stays.
const pluginIndex = "90"

// Run connects to the runtime's NRI socket and serves it until ctx ends,
// connecting again whenever the runtime restarts.
//
// The runtime creates a container without the hook's adjustment, vgpud
// counted as consulted by its validator, when its call to vgpud fails
// because the connection closed: during the call, and for every call of
// the runtime's next event after the close, as a closed plugin stays
// listed until then (nri v0.12.3). So the hook stops by refusing every
// call and letting the one being answered finish, and Run returns then,
// leaving the connection open, still refusing, until the process exits
// (holdMax at most): the runtime's next event is then most likely this
// container's own exit, not a container it would create unadjusted.
func (h *Hook) Run(ctx context.Context, socket string) error {
	conn, closeConn := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- h.serve(conn, socket) }()
	select {
	case <-ctx.Done():
		h.drain(drainMax)
		// Bounded, should the process hang on its way out after a
		// role's error (a signal's stop has --shutdown-grace): refusing
		// for ever would hold every container of the node.
		go func() {
			<-h.clock.After(holdMax)
			closeConn()
		}()
		return nil
	case err := <-ended:
		closeConn()
		return err
	}
}

// holdMax bounds how long the drained hook keeps its connection when the
// process does not exit: longer than the stop's grace.
const holdMax = time.Minute

// serve keeps a connection to the runtime on conn, which lasts the
// process's life (see Run), until the hook drains with none open.
func (h *Hook) serve(conn context.Context, socket string) error {
	backoff := 200 * time.Millisecond
	for !h.stopping() {
		s, err := stub.New(h, stub.WithPluginName(PluginName), stub.WithPluginIdx(pluginIndex), stub.WithSocketPath(socket),
			stub.WithLogger(logger{h.log}), stub.WithOnClose(h.setDown))
		if err != nil {
			return fmt.Errorf("NRI plugin: %w", err)
		}
		began := h.clock.Now()
		err = s.Run(conn)
		h.setDown()
		// Draining: a new connection would only refuse, and closing
		// it would open the runtime's gap again.
		if h.stopping() || conn.Err() != nil {
			return nil
		}
		if h.clock.Since(began) > 10*time.Second {
			backoff = 200 * time.Millisecond
		}
		h.log.Warn("container runtime connection ended; connecting again", "socket", socket, "err", err, "in", backoff)
		<-h.clock.After(backoff)
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
