package plugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/node/gpu"
	"github.com/vgpud/vgpud/node/health"
	"github.com/vgpud/vgpud/protocol"
)

// fakeKubelet is kubelet's registration service on dir/kubelet.sock. Like
// kubelet, it dials each plugin that registers and follows its ListAndWatch.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir     string
	srv     *grpc.Server
	started time.Time
	regs    chan *pluginapi.RegisterRequest
	lists   chan []*pluginapi.Device
}

func startKubelet(t *testing.T, dir string, lists chan []*pluginapi.Device) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{dir: dir, srv: grpc.NewServer(), regs: make(chan *pluginapi.RegisterRequest, 4), lists: lists}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k.started = time.Now()
	go func() { _ = k.srv.Serve(l) }()
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	go k.follow(r.Endpoint)
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) follow(endpoint string) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		k.lists <- resp.Devices
	}
}

// restart stops kubelet the way a kubelet restart looks on disk: its
// socket and every plugin socket are removed, then kubelet.sock returns.
func (k *fakeKubelet) stop(t *testing.T) {
	k.srv.Stop()
	entries, _ := os.ReadDir(k.dir)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(k.dir, e.Name()))
	}
}

func TestServerAgainstFakeKubelet(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet := startKubelet(t, dir, lists)

	lib, err := gpu.Open("mock:dgxa100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	gpus := make([]GPU, len(devs))
	uuids := make([]string, len(devs))
	for i, d := range devs {
		gpus[i], uuids[i] = GPU{UUID: d.UUID, NUMA: d.NUMA}, d.UUID
	}
	p := New(Options{Node: "n1", Resources: protocol.DefaultResourceNames(), Split: 10, ResolveWait: time.Second}, gpus, newFakePods(), newFakePhases(nil, 0), quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher := health.NewWatcher(lib, uuids, health.NewTracker(health.DefaultIgnoredXIDs, 300*time.Millisecond), p.SetUnhealthy, quietLog())
	go watcher.Run(ctx)
	s := NewServer(p, dir, "vgpud.sock", quietLog())
	go s.Run(ctx)

	r := recv(t, kubelet.regs)
	if r.Version != pluginapi.Version || r.Endpoint != "vgpud.sock" || r.ResourceName != "nvidia.com/gpu" || !r.Options.GetPreferredAllocationAvailable {
		t.Fatalf("registration %+v", r)
	}
	first := recv(t, lists)
	if len(first) != 80 {
		t.Fatalf("initial ListAndWatch has %d devices, want 8 GPUs x 10", len(first))
	}
	for _, d := range first {
		if d.Health != pluginapi.Healthy || d.Topology == nil || len(d.Topology.Nodes) != 1 {
			t.Fatalf("device %+v", d)
		}
	}

	// An injected XID takes GPU 3 out; after the quiet period it returns.
	start := time.Now()
	if err := lib.(*gpu.Mock).InjectXID(uuids[3], 79); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, lists); len(got) != 70 {
		t.Fatalf("after XID 79: %d devices, want 70", len(got))
	}
	down := time.Since(start)
	if got := recv(t, lists); len(got) != 80 {
		t.Fatalf("after recovery: %d devices, want 80", len(got))
	}
	t.Logf("XID 79 -> GPU out of ListAndWatch in %v; back after %v (quiet period 300ms)", down.Round(time.Microsecond), time.Since(start).Round(time.Millisecond))

	// Kubelet restarts: sockets wiped, kubelet.sock created again.
	kubelet.stop(t)
	time.Sleep(50 * time.Millisecond)
	kubelet = startKubelet(t, dir, lists)
	r = recv(t, kubelet.regs)
	seen := time.Since(kubelet.started)
	if r.Endpoint != "vgpud.sock" {
		t.Fatalf("re-registration %+v", r)
	}
	if got := recv(t, lists); len(got) != 80 {
		t.Fatalf("after re-registration: %d devices", len(got))
	}
	reg := s.Registration()
	t.Logf("kubelet.sock created -> Register received: %v (plugin's own measure %v, %d registrations)", seen.Round(time.Microsecond), reg.Latency.Round(time.Microsecond), reg.Count)

	// Our socket removed alone: recreated and registered again.
	if err := os.Remove(filepath.Join(dir, "vgpud.sock")); err != nil {
		t.Fatal(err)
	}
	recv(t, kubelet.regs)
	if _, err := os.Stat(filepath.Join(dir, "vgpud.sock")); err != nil {
		t.Fatalf("socket not recreated: %v", err)
	}
	// Nothing else follows: our own socket churn must not loop.
	select {
	case r := <-kubelet.regs:
		t.Fatalf("unexpected registration %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if reg := s.Registration(); reg.Count != 3 || reg.Error != "" {
		t.Errorf("registration record %+v, want 3 and no error", reg)
	}
}

func recv[T any](t *testing.T, c chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("nothing within 5s")
		var zero T
		return zero
	}
}
