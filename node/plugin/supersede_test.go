package plugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/protocol"
)

// A kubelet that deletes the plugin's socket right after taking its first
// registration (a restarting kubelet cleaning up) never reads the devices
// through it. The plugin must serve and register again at once, not wait
// out the 5 s it gives kubelet to read the devices first.
func TestRegistrationGivesWayToSocketEvents(t *testing.T) {
	dir := t.TempDir()
	k := &cleaningKubelet{dir: dir, lists: make(chan []*pluginapi.Device, 16)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	states := make(chan string, 16)
	start := time.Now()
	runServer(t, dir, stateRecorder(states), func(s *Server) { s.retry = time.Hour })
	if got := recv(t, states); got != protocol.PluginServing {
		t.Fatalf("the plugin says %q, want %q", got, protocol.PluginServing)
	}
	took := time.Since(start)
	t.Logf("serving %v after start, %d registrations", took.Round(time.Millisecond), k.count())
	if took > 2*time.Second {
		t.Errorf("serving came %v after start: the plugin waited for a stream that could not come", took.Round(time.Millisecond))
	}
	select {
	case <-k.lists: // the plugin said serving once it had sent them
	case <-time.After(time.Second):
		t.Error("kubelet got no device list")
	}
}

// cleaningKubelet deletes the plugin socket on the first registration and
// follows the plugin's devices from the second on.
type cleaningKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir   string
	lists chan []*pluginapi.Device

	mu sync.Mutex
	n  int
}

func (k *cleaningKubelet) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}

func (k *cleaningKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.n++
	first := k.n == 1
	k.mu.Unlock()
	if first {
		_ = os.Remove(filepath.Join(k.dir, r.Endpoint))
		return &pluginapi.Empty{}, nil
	}
	go k.follow(r.Endpoint)
	return &pluginapi.Empty{}, nil
}

func (k *cleaningKubelet) follow(endpoint string) {
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
