// Package fakekubelet is kubelet's device-plugin side for tests: the
// Registration service on <dir>/kubelet.sock that, like kubelet, dials
// each plugin that registers, follows its ListAndWatch and can call
// Allocate on it.
package fakekubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Kubelet is a fake kubelet serving in one directory.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir     string
	srv     *grpc.Server
	Started time.Time
	// Registrations receives every RegisterRequest.
	Registrations chan *pluginapi.RegisterRequest
	// Lists receives every device list a registered plugin streams.
	Lists chan []*pluginapi.Device

	mu       sync.Mutex
	endpoint string
	unfollow func(*pluginapi.RegisterRequest) bool
	streams  context.Context // the ListAndWatch streams' context
	drop     context.CancelFunc
}

// Start serves dir/kubelet.sock, first removing every socket in dir as
// kubelet does when it starts. Lists may be shared across restarts.
func Start(dir string, lists chan []*pluginapi.Device) (*Kubelet, error) {
	removeAll(dir)
	k := &Kubelet{dir: dir, srv: grpc.NewServer(), Registrations: make(chan *pluginapi.RegisterRequest, 16), Lists: lists}
	k.streams, k.drop = context.WithCancel(context.Background())
	pluginapi.RegisterRegistrationServer(k.srv, k)
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		return nil, fmt.Errorf("fake kubelet: %w", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // a killed kubelet leaves its socket file
	k.Started = time.Now()
	go func() { _ = k.srv.Serve(l) }()
	return k, nil
}

// Register records r and starts following the plugin's devices.
func (k *Kubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.endpoint = r.Endpoint
	unfollow := k.unfollow
	k.mu.Unlock()
	k.Registrations <- r
	if unfollow == nil || !unfollow(r) {
		go k.follow(r.Endpoint)
	}
	return &pluginapi.Empty{}, nil
}

// Unfollow has f run on each registration before kubelet follows the
// plugin; where f returns true kubelet takes the registration but never
// reads the devices, as when it deleted the socket meanwhile.
func (k *Kubelet) Unfollow(f func(*pluginapi.RegisterRequest) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.unfollow = f
}

func (k *Kubelet) follow(endpoint string) {
	k.mu.Lock()
	ctx := k.streams
	k.mu.Unlock()
	conn, err := k.dial(endpoint)
	if err != nil {
		return
	}
	defer conn.Close()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		k.Lists <- resp.Devices
	}
}

func (k *Kubelet) dial(endpoint string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+filepath.Join(k.dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Allocate calls the last registered plugin's Allocate for one container.
func (k *Kubelet) Allocate(ctx context.Context, deviceIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	k.mu.Lock()
	endpoint := k.endpoint
	k.mu.Unlock()
	conn, err := k.dial(endpoint)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := pluginapi.NewDevicePluginClient(conn).Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: deviceIDs}}})
	if err != nil {
		return nil, err
	}
	return resp.ContainerResponses[0], nil
}

// DropStreams ends every ListAndWatch stream while kubelet keeps serving,
// as kubelet does when it disconnects a plugin.
func (k *Kubelet) DropStreams() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.drop()
	k.streams, k.drop = context.WithCancel(context.Background())
}

// Stop stops kubelet the way a kubelet restart looks: its streams end,
// and its socket and every plugin socket are removed.
func (k *Kubelet) Stop() {
	k.Kill()
	removeAll(k.dir)
}

// Kill stops kubelet as a killed process does: its streams end, and the
// socket files stay until the next kubelet starts.
func (k *Kubelet) Kill() {
	k.mu.Lock()
	k.drop()
	k.mu.Unlock()
	k.srv.Stop()
}

func removeAll(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
}
