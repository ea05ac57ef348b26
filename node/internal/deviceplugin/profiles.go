package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/node/internal/kubeletwatch"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// ProfilePlugin offers one MIG profile's instances under the profile's
// own resource (NVIDIA's "mixed" strategy, wellknown.MIGProfiles). It
// serves only where the runtime names pods: the runtime hook hands each
// container the instance its assignment names, and kubelet's device IDs
// here are bookkeeping, counted as the GPU resource's are.
type ProfilePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource  string
	instances []string // the profile's instances on this node, by UUID
	main      *Plugin  // its device list says which instances are healthy

	mu      sync.Mutex
	streams int           // ListAndWatch streams open
	ended   chan struct{} // told (never blocking) when one ends
}

// open reports how many ListAndWatch streams kubelet holds.
func (p *ProfilePlugin) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams
}

func (p *ProfilePlugin) countStream(delta int) {
	p.mu.Lock()
	p.streams += delta
	p.mu.Unlock()
	if delta < 0 {
		select {
		case p.ended <- struct{}{}:
		default:
		}
	}
}

// devices lists the profile's instances, healthy where the GPU
// resource's plugin offers them (their GPU is healthy).
func (p *ProfilePlugin) devices() ([]*pluginapi.Device, <-chan struct{}) {
	all, changed := p.main.Devices()
	offered := make(map[string]*pluginapi.Device, len(all))
	for _, d := range all {
		offered[d.ID] = d
	}
	out := make([]*pluginapi.Device, 0, len(p.instances))
	for _, u := range p.instances {
		d := &pluginapi.Device{ID: u, Health: pluginapi.Unhealthy}
		if m, ok := offered[deviceID(u, 0)]; ok {
			d.Health, d.Topology = pluginapi.Healthy, m.Topology
		}
		out = append(out, d)
	}
	return out, changed
}

// GetDevicePluginOptions asks kubelet for nothing extra.
func (p *ProfilePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the instances, then again at every health change.
func (p *ProfilePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	p.countStream(1)
	defer p.countStream(-1)
	for {
		devs, changed := p.devices()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return fmt.Errorf("send %s devices to kubelet: %w", p.resource, err)
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// Allocate answers kubelet's bookkeeping: the runtime hook grants the
// container its instance from the assignment, whichever IDs kubelet took.
func (p *ProfilePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, bookkeepingResponse())
	}
	return resp, nil
}

// GetPreferredAllocation is not offered (GetDevicePluginOptions).
func (p *ProfilePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer is not asked for.
func (p *ProfilePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// ProfileServers serve a ProfilePlugin per MIG profile on this node, each
// on its own socket beside the GPU resource's, and keep them registered
// with kubelet.
type ProfileServers struct {
	dir     string
	plugins []*ProfilePlugin
	sockets []string // file names in dir, one per plugin
	grpc    []*grpc.Server
	ended   chan struct{} // a ListAndWatch stream of some plugin ended
	retry   time.Duration // retryGone; shorter in tests
	clock   clock.WithTicker
	log     *slog.Logger
}

// NewProfileServers groups gpus' MIG instances by profile; a profile
// that names no resource vgpud's scheduler serves is left out and logged. mainSocket is the
// GPU resource's socket, whose name the others extend.
func NewProfileServers(main *Plugin, gpus []AdvertisedGPU, names wellknown.ResourceNames, dir, mainSocket string, clk clock.WithTicker, log *slog.Logger) *ProfileServers {
	s := &ProfileServers{dir: dir, retry: retryGone, clock: clk, log: log}
	byProfile := map[string][]string{}
	for _, g := range gpus {
		if g.Parent == "" {
			continue
		}
		if names.MIGResource(g.Profile) == "" || !wellknown.KnownMIGProfile(g.Profile) {
			log.Warn("MIG instance not offered under a resource of its profile", "instance", g.UUID, "profile", g.Profile, "reason", "not among the profiles vgpud's scheduler serves, or names no resource")
			continue
		}
		byProfile[g.Profile] = append(byProfile[g.Profile], g.UUID)
	}
	base := strings.TrimSuffix(mainSocket, ".sock")
	s.ended = make(chan struct{}, 1)
	for _, profile := range slices.Sorted(maps.Keys(byProfile)) {
		s.plugins = append(s.plugins, &ProfilePlugin{resource: names.MIGResource(profile), instances: byProfile[profile], main: main, ended: s.ended})
		s.sockets = append(s.sockets, base+"-mig-"+profile+".sock")
	}
	s.grpc = make([]*grpc.Server, len(s.plugins))
	return s
}

// Resources lists the resources served, one per profile.
func (s *ProfileServers) Resources() []string {
	out := make([]string, len(s.plugins))
	for i, p := range s.plugins {
		out[i] = p.resource
	}
	return out
}

// Run serves and registers every profile, and again whenever kubelet
// restarts, removes a socket, or drops a plugin, until ctx ends; then it
// stops serving, which removes the sockets. Its caller ends it after
// the GPU resource's plugin has drained, so that a pod bound meanwhile
// finds its profile's devices still there.
func (s *ProfileServers) Run(ctx context.Context) error {
	if len(s.plugins) == 0 {
		return nil
	}
	watch, err := kubeletwatch.New(s.dir, s.sockets...)
	if err != nil {
		return fmt.Errorf("MIG profile plugins: %w", err)
	}
	events := make(chan kubeletwatch.Event, 16)
	watchErr := make(chan error, 1)
	go func() { watchErr <- watch.Run(ctx, events) }()
	defer s.stop()
	for i := range s.plugins {
		awaitPredecessor(s.clock, s.log, filepath.Join(s.dir, s.sockets[i]))
	}
	var retry <-chan time.Time
	if !s.refresh(ctx, "start") {
		retry = s.clock.After(s.retry)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-watchErr:
			if err != nil {
				return fmt.Errorf("MIG profile plugins: %w", err)
			}
			return nil
		case ev := <-events:
			if !s.refresh(ctx, string(ev)) {
				retry = s.clock.After(s.retry)
			}
		case <-s.ended:
			// kubelet dropped a plugin, or is restarting (whose socket
			// events then register again): look again in a while.
			retry = s.clock.After(s.retry)
		case <-retry:
			retry = nil
			if s.dropped() && !s.refresh(ctx, "stream ended") {
				retry = s.clock.After(s.retry)
			}
		}
	}
}

// dropped reports whether some plugin has no stream while kubelet
// listens and its socket is there: kubelet dropped it, or never took its
// registration.
func (s *ProfileServers) dropped() bool {
	if !kubeletAnswers(s.dir) {
		return false
	}
	for i, p := range s.plugins {
		if _, err := os.Stat(filepath.Join(s.dir, s.sockets[i])); err == nil && p.open() == 0 {
			return true
		}
	}
	return false
}

// refresh serves each profile whose socket is gone and registers every
// one while kubelet listens; false means one failed and is worth another
// try. A remove event for a socket serve has already replaced is our own
// doing, and changes nothing.
func (s *ProfileServers) refresh(ctx context.Context, trigger string) bool {
	if trigger == string(kubeletwatch.SocketRemoved) && s.allServed() {
		return true
	}
	kubelet := filepath.Join(s.dir, "kubelet.sock")
	ok := true
	for i, p := range s.plugins {
		path := filepath.Join(s.dir, s.sockets[i])
		if _, err := os.Stat(path); err != nil || s.grpc[i] == nil {
			if err := s.serve(i, path); err != nil {
				s.log.Error("MIG profile plugin not served", "resource", p.resource, "err", err)
				ok = false
				continue
			}
		}
		if _, err := os.Stat(kubelet); err != nil {
			continue // kubelet.sock's creation registers it
		}
		err := kubeletapi.Register(ctx, kubelet, kubeletapi.Registration{Endpoint: s.sockets[i], ResourceName: p.resource})
		if err != nil {
			s.log.Error("MIG profile plugin not registered; trying again", "resource", p.resource, "trigger", trigger, "err", err)
			ok = false
			continue
		}
		s.log.Info("registered with kubelet", "resource", p.resource, "instances", len(p.instances), "trigger", trigger)
	}
	return ok
}

// allServed reports whether every socket is there, served by this
// process.
func (s *ProfileServers) allServed() bool {
	for i := range s.plugins {
		if _, err := os.Stat(filepath.Join(s.dir, s.sockets[i])); err != nil || s.grpc[i] == nil {
			return false
		}
	}
	return true
}

func (s *ProfileServers) serve(i int, path string) error {
	if s.grpc[i] != nil {
		s.grpc[i].Stop()
	}
	g, err := servePlugin(path, s.plugins[i], s.log.With("resource", s.plugins[i].resource))
	if err != nil {
		return err
	}
	s.grpc[i] = g
	return nil
}

// stop ends every server; closing its listener unlinks its socket (Go's
// default), before a successor waiting on it can listen there, so no
// removal after it can take the successor's. kubelet then counts the
// profile's devices as gone.
func (s *ProfileServers) stop() {
	for i, g := range s.grpc {
		if g == nil {
			continue
		}
		g.Stop()
		s.grpc[i] = nil
	}
}
