// Package kubeletapi holds thin clients of the kubelet's own gRPC APIs, so
// the node role's logic can be tested against fakes on temp sockets.
package kubeletapi

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Registration is what a device plugin tells kubelet about itself.
type Registration struct {
	Endpoint     string // the plugin's socket file name, relative to the plugin dir
	ResourceName string
	// PreferredAllocation: kubelet asks the plugin which devices to pick.
	PreferredAllocation bool
}

// Register calls kubelet's Registration service on kubeletSocket (usually
// /var/lib/kubelet/device-plugins/kubelet.sock).
func Register(ctx context.Context, kubeletSocket string, r Registration) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// kubelet.sock appears at bind(), a moment before kubelet listens: a
	// dial then is refused, and gRPC's default 1 s backoff would add a
	// second to every re-registration.
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}, MinConnectTimeout: time.Second}))
	if err != nil {
		return fmt.Errorf("dial kubelet at %s: %w", kubeletSocket, err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     r.Endpoint,
		ResourceName: r.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: r.PreferredAllocation},
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("register %s with kubelet at %s: %w", r.ResourceName, kubeletSocket, err)
	}
	return nil
}
