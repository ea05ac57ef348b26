package plugin

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

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/node/pluginwatch"
)

// Registration is the record of this plugin's registrations with kubelet.
type Registration struct {
	Count   int           `json:"count"`
	Last    time.Time     `json:"last,omitzero"`
	Latency time.Duration `json:"latencyNanos"` // from the trigger to kubelet's answer
	Trigger string        `json:"trigger,omitempty"`
	Error   string        `json:"error,omitempty"` // the last failure, cleared by a success
}

// Server runs the plugin's gRPC service on a socket in kubelet's
// device-plugin directory and keeps it registered: kubelet forgets
// plugins when it restarts, and deletes their sockets.
type Server struct {
	plugin *Plugin
	dir    string
	socket string // file name in dir
	log    *slog.Logger

	grpc *grpc.Server

	mu  sync.Mutex
	reg Registration
}

// NewServer serves plugin as dir/socket.
func NewServer(plugin *Plugin, dir, socket string, log *slog.Logger) *Server {
	return &Server{plugin: plugin, dir: dir, socket: socket, log: log}
}

// Registration returns the registration record.
func (s *Server) Registration() Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg
}

// Run serves, registers, and serves and registers again whenever kubelet
// restarts or the socket is removed, until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("device-plugin directory: %w", err)
	}
	events := make(chan pluginwatch.Event, 16)
	watchErr := make(chan error, 1)
	go func() { watchErr <- pluginwatch.Watch(ctx, s.dir, s.socket, events) }()
	defer s.stop()
	s.refresh(ctx, "start", time.Now())
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
			s.refresh(ctx, string(ev), time.Now())
		}
	}
}

// refresh serves again if the socket is gone and registers if kubelet is
// listening. A remove event for a socket already recreated is our own
// doing and is ignored.
func (s *Server) refresh(ctx context.Context, trigger string, at time.Time) {
	path := filepath.Join(s.dir, s.socket)
	if _, err := os.Stat(path); err != nil || s.grpc == nil {
		if err := s.serve(path); err != nil {
			s.failed(trigger, err)
			return
		}
	} else if trigger == string(pluginwatch.SocketRemoved) {
		return
	}
	kubelet := filepath.Join(s.dir, "kubelet.sock")
	if _, err := os.Stat(kubelet); err != nil {
		s.log.Info("kubelet is not listening yet; will register when kubelet.sock appears", "socket", kubelet)
		return
	}
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
	lat := time.Since(at)
	s.mu.Lock()
	s.reg.Count++
	s.reg.Last, s.reg.Latency, s.reg.Trigger, s.reg.Error = time.Now(), lat, trigger, ""
	s.mu.Unlock()
	s.log.Info("registered with kubelet", "resource", s.plugin.opts.Resources.GPU, "trigger", trigger, "latency", lat.Round(time.Microsecond))
}

func (s *Server) failed(trigger string, err error) {
	s.mu.Lock()
	s.reg.Error = err.Error()
	s.mu.Unlock()
	s.log.Error("device plugin not registered; waiting for kubelet to restart or the socket to be removed", "trigger", trigger, "err", err)
}

func (s *Server) serve(path string) error {
	s.stop()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s.plugin)
	go func() {
		if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("device plugin server stopped", "err", err)
		}
	}()
	s.grpc = g
	return nil
}

func (s *Server) stop() {
	if s.grpc != nil {
		s.grpc.Stop()
		s.grpc = nil
	}
}
