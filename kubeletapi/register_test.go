package kubeletapi

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeKubelet records the RegisterRequests it gets.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (f *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	f.got <- r
	return &pluginapi.Empty{}, nil
}

func TestRegisterSendsTheFields(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fk := &fakeKubelet{got: make(chan *pluginapi.RegisterRequest, 1)}
	pluginapi.RegisterRegistrationServer(srv, fk)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	err = Register(context.Background(), sock, Registration{Endpoint: "vgpud.sock", ResourceName: "nvidia.com/gpu", PreferredAllocation: true})
	if err != nil {
		t.Fatal(err)
	}
	r := <-fk.got
	if r.Version != pluginapi.Version || r.Endpoint != "vgpud.sock" || r.ResourceName != "nvidia.com/gpu" || !r.Options.GetPreferredAllocationAvailable {
		t.Fatalf("register request %+v", r)
	}
}

func TestRegisterWithoutKubeletSaysWhere(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := Register(ctx, sock, Registration{Endpoint: "vgpud.sock", ResourceName: "nvidia.com/gpu"})
	if err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("want an error naming %s, got %v", sock, err)
	}
}
