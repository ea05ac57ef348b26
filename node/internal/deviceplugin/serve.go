package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/node/internal/kubeletwatch"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// RegistrationState is the record of this plugin's registrations with kubelet.
type RegistrationState struct {
	Count   int           `json:"count"`
	Last    time.Time     `json:"last,omitzero"`
	Latency time.Duration `json:"latencyNanos"` // from the trigger to kubelet's answer
	Trigger string        `json:"trigger,omitempty"`
	Error   string        `json:"error,omitempty"` // the last failure, cleared by a success
}

// PluginServer runs the plugin's gRPC service on a socket in kubelet's
// device-plugin directory and keeps it registered: kubelet forgets
// plugins when it restarts, and deletes their sockets.
type PluginServer struct {
	plugin *Plugin
	dir    string
	socket string // file name in dir
	state  StateWriter
	quiet  time.Duration // drainQuiet; shorter in tests
	retry  time.Duration // retryGone; shorter in tests
	clock  clock.WithTicker
	log    *slog.Logger

	grpc   *grpc.Server
	events chan kubeletwatch.Event // socket events Run has yet to handle
	// unsaid: the last registration gave way to a socket event before it
	// said serving; the next event registers again, even our own remove.
	unsaid bool

	self        string      // this replica's pod, namespace/name
	kubeletPods KubeletPods // nil: serving does not wait for kubelet's pod list

	mu  sync.Mutex
	reg RegistrationState
}

// KubeletPods lists the pods kubelet itself holds (its PodResources API),
// as namespace/name.
type KubeletPods func(ctx context.Context) ([]string, error)

// AwaitKubeletPods makes the plugin say serving only once kubelet lists
// self, this replica's pod. A kubelet that has just started lists its pods
// from the API server a while after it takes plugins, and admits every pod
// of that first list before it frees the devices of pods gone since its
// last checkpoint: a pod bound before kubelet lists self may be admitted
// against those stale books; one bound after comes in a later update.
func (s *PluginServer) AwaitKubeletPods(self string, list KubeletPods) {
	s.self, s.kubeletPods = self, list
}

// StateWriter tells the leader whether this node's plugin serves
// (wellknown.PluginServing) or is going away (wellknown.PluginDraining).
type StateWriter interface {
	SetPluginState(ctx context.Context, state string) error
}

const (
	// drainQuiet is how long a stopping plugin keeps serving after it
	// said "draining": a bind that passed the leader's check just before
	// the leader's cache saw that lands within it.
	drainQuiet = 2 * time.Second
	// drainTimeout bounds the whole shutdown, well inside the pod's
	// default 30 s grace period.
	drainTimeout = 8 * time.Second
)

// NewServer serves plugin as dir/socket; state may be nil. clk times the
// registrations and the waits around them.
func NewServer(plugin *Plugin, dir, socket string, state StateWriter, clk clock.WithTicker, log *slog.Logger) *PluginServer {
	return &PluginServer{plugin: plugin, dir: dir, socket: socket, state: state, quiet: drainQuiet, retry: retryGone, clock: clk, log: log}
}

// Registration returns the registration record.
func (s *PluginServer) Registration() RegistrationState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg
}

// Run serves, registers, and serves and registers again whenever kubelet
// restarts or the socket is removed, until ctx ends.
func (s *PluginServer) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("device-plugin directory: %w", err)
	}
	watch, err := kubeletwatch.New(s.dir, s.socket)
	if err != nil {
		return fmt.Errorf("device plugin: %w", err)
	}
	events := make(chan kubeletwatch.Event, 16)
	s.events = events
	watchErr := make(chan error, 1)
	go func() { watchErr <- watch.Run(ctx, events) }()
	defer s.drain()
	// Read before the first registration, so that a stream kubelet opens
	// and ends during it is seen.
	_, streams := s.plugin.Streams()
	s.refresh(ctx, "start", s.clock.Now())
	var retry <-chan time.Time // registering again after kubelet dropped the plugin
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-watchErr:
			if err != nil {
				return fmt.Errorf("device plugin: %w", err)
			}
			return nil
		case ev := <-events:
			s.refresh(ctx, string(ev), s.clock.Now())
		case <-streams:
			var open int
			open, streams = s.plugin.Streams()
			if open == 0 {
				s.kubeletGone(ctx)
				retry = s.clock.After(s.retry)
			}
		case <-retry:
			retry = nil
			switch open, _ := s.plugin.Streams(); {
			case open > 0 || s.superseding():
			case !s.kubeletListening():
				s.log.Info("kubelet does not answer; registering once it is back")
			default:
				s.refresh(ctx, "stream ended", s.clock.Now())
			}
		}
	}
}

// retryGone is how long a plugin whose streams all ended waits for
// kubelet's restart to show before it registers again on its own, in case
// kubelet merely dropped it.
const retryGone = 2 * time.Second

// kubeletListening reports whether kubelet answers on its socket now and
// this plugin's socket is still there. A restarting kubelet must not be
// registered with from here: it deletes the plugin sockets as it starts,
// so a registration then waits out its timeout, and holds up the one the
// socket events would make at once (a restarted kubelet fails even
// running pods it re-admits while no plugin is registered).
func (s *PluginServer) kubeletListening() bool {
	if _, err := os.Stat(filepath.Join(s.dir, s.socket)); err != nil {
		return false
	}
	return kubeletAnswers(s.dir)
}

// kubeletAnswers reports whether kubelet answers on its socket in dir now.
func kubeletAnswers(dir string) bool {
	c, err := net.DialTimeout("unix", filepath.Join(dir, "kubelet.sock"), 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// kubeletGone runs when the last ListAndWatch stream has ended: kubelet
// is restarting, or it dropped this plugin. Until kubelet reads the
// devices again it fails every GPU pod it admits; and a kubelet that has
// just restarted admits the pods already bound here while it still counts
// the devices of pods gone since its last checkpoint (it frees those only
// once its pod sources have synced), so it may have no free slice of the
// GPUs a pod bound meanwhile was assigned. The leader binds here again
// when refresh says serving.
func (s *PluginServer) kubeletGone(ctx context.Context) {
	s.log.Warn("kubelet holds no device-plugin stream; no binds to this node until it reads the devices again")
	s.setState(ctx, wellknown.PluginWaiting)
}

// refresh serves again if the socket is gone and registers if kubelet is
// listening. A remove event for a socket already recreated is our own
// doing (serve removing a stale socket) and is ignored, unless the
// registration it cut short has not said serving yet.
func (s *PluginServer) refresh(ctx context.Context, trigger string, at time.Time) {
	path := filepath.Join(s.dir, s.socket)
	if _, err := os.Stat(path); err != nil || s.grpc == nil {
		if err := s.serve(path); err != nil {
			s.failed(trigger, err)
			return
		}
	} else if trigger == string(kubeletwatch.SocketRemoved) && !s.unsaid {
		return
	}
	s.unsaid = false
	kubelet := filepath.Join(s.dir, "kubelet.sock")
	if _, err := os.Stat(kubelet); err != nil {
		s.log.Info("kubelet is not listening yet; will register when kubelet.sock appears", "socket", kubelet)
		return
	}
	listings, _ := s.plugin.Listings()
	err := kubeletapi.Register(ctx, kubelet, kubeletapi.Registration{
		Endpoint:            s.socket,
		ResourceName:        s.plugin.opts.Resources.GPU,
		PreferredAllocation: true,
	})
	s.plugin.obs.Registered(err)
	if err != nil {
		s.failed(trigger, err)
		return
	}
	lat := s.clock.Since(at)
	s.mu.Lock()
	s.reg.Count++
	s.reg.Last, s.reg.Latency, s.reg.Trigger, s.reg.Error = s.clock.Now(), lat, trigger, ""
	s.mu.Unlock()
	s.log.Info("registered with kubelet", "resource", s.plugin.opts.Resources.GPU, "trigger", trigger, "latency", lat.Round(time.Microsecond))
	// Serving only once kubelet holds the devices: a pod bound before
	// that is refused ("no healthy devices present").
	switch s.listedSince(ctx, listings) {
	case superseded:
		s.log.Info("the sockets changed again before kubelet read the devices; serving and registering again")
		s.unsaid = true
		return
	case timedOut:
		s.log.Warn("kubelet has not read the device list; saying serving anyway", "waited", listWait)
	}
	switch waited, res := s.kubeletListsSelf(ctx); {
	case res == superseded:
		s.log.Info("the sockets changed again before kubelet listed this replica's pod; serving and registering again")
		s.unsaid = true
		return
	case res == timedOut:
		s.log.Warn("kubelet does not list this replica's pod; saying serving anyway", "pod", s.self, "waited", waited.Round(time.Millisecond))
	case waited > 0:
		s.log.Info("kubelet lists this replica's pod", "pod", s.self, "waited", waited.Round(time.Millisecond))
	}
	s.setState(ctx, wellknown.PluginServing)
}

// drain stops the plugin the way that fails no pod: it tells the leader
// first (no more binds here), keeps serving until the pods already bound
// here are allocated (kubelet refuses a pod whose plugin went away) and an
// Allocate in flight has finished, and only then stops serving.
func (s *PluginServer) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	s.setState(ctx, wellknown.PluginDraining)
	if pod := s.plugin.settled(ctx, s.quiet); pod != "" {
		s.log.Warn("stopping with a bound pod not yet allocated", "pod", pod, "waited", drainTimeout)
	}
	if !s.plugin.idle(ctx) {
		s.log.Warn("stopping with an Allocate still in flight", "waited", drainTimeout)
	}
	s.stop()
}

func (s *PluginServer) setState(ctx context.Context, state string) {
	if s.state == nil {
		return
	}
	if err := s.state.SetPluginState(ctx, state); err != nil {
		s.log.Error("tell the leader the device plugin's state", "state", state, "err", err)
		return
	}
	s.log.Info("device plugin state published", "state", state)
}

func (s *PluginServer) failed(trigger string, err error) {
	s.mu.Lock()
	s.reg.Error = err.Error()
	s.mu.Unlock()
	s.log.Error("device plugin not registered; waiting for kubelet to restart or the socket to be removed", "trigger", trigger, "err", err)
}

func (s *PluginServer) serve(path string) error {
	if s.grpc == nil {
		s.awaitPredecessor(path)
	}
	s.stop()
	g, err := servePlugin(path, s.plugin, s.log.With("resource", s.plugin.opts.Resources.GPU))
	if err != nil {
		return err
	}
	s.grpc = g
	return nil
}

// servePlugin serves plugin on the unix socket path, in place of any
// stale socket there; the server's errors are logged to log.
func servePlugin(path string, plugin pluginapi.DevicePluginServer, log *slog.Logger) (*grpc.Server, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, plugin)
	go func() {
		if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("device plugin server stopped", "err", err)
		}
	}()
	return g, nil
}

// predecessorWait bounds the wait for a previous process of this plugin
// (the DaemonSet pod being replaced, still draining) to stop serving.
const predecessorWait = 15 * time.Second

// awaitPredecessor waits while another process still serves on path. The
// DaemonSet starts the new pod while the old one drains; registering
// under the same resource then would be undone by kubelet: when the old
// plugin's stream ends, kubelet disconnects whichever client is
// registered for the resource, by then the new one.
func (s *PluginServer) awaitPredecessor(path string) { awaitPredecessor(s.clock, s.log, path) }

// awaitPredecessor waits while another process serves on path, as
// (*Server).awaitPredecessor says.
func awaitPredecessor(clk clock.Clock, log *slog.Logger, path string) {
	deadline := clk.Now().Add(predecessorWait)
	waited := false
	for clk.Now().Before(deadline) {
		c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
		if err != nil {
			break
		}
		_ = c.Close()
		if !waited {
			log.Info("a previous vgpud still serves the device-plugin socket; waiting for it to drain", "socket", path)
			waited = true
		}
		<-clk.After(200 * time.Millisecond)
	}
	if waited {
		// Let kubelet see the old stream end before the new registration.
		<-clk.After(500 * time.Millisecond)
	}
}

func (s *PluginServer) stop() {
	if s.grpc != nil {
		s.grpc.Stop()
		s.grpc = nil
	}
}
