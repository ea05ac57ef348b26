package kubeletapi

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type fakeLister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
}

func (fakeLister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "train", Namespace: "ai", Containers: []*podresourcesapi.ContainerResources{
			{Name: "main", Devices: []*podresourcesapi.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-a-1", "GPU-b-0"}},
				{ResourceName: "example.com/nic", DeviceIds: []string{"nic0"}},
			}},
			{Name: "sidecar"},
		}},
		{Name: "web", Namespace: "ai", Containers: []*podresourcesapi.ContainerResources{{Name: "nginx"}}},
	}}, nil
}

// ListPodDevices keeps only the devices of the resource asked for, and
// only pods holding some.
func TestListPodDevices(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, fakeLister{})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	got, err := ListPodDevices(context.Background(), sock, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "train" || len(got[0].Containers) != 1 || len(got[0].Containers["main"]) != 2 || got[0].Containers["main"][1] != "GPU-b-0" {
		t.Fatalf("got %+v", got)
	}
	if _, err := ListPodDevices(context.Background(), filepath.Join(t.TempDir(), "none.sock"), "nvidia.com/gpu"); err == nil {
		t.Fatal("no kubelet: want an error")
	}
	// ListPods names every pod kubelet holds, devices or not.
	names, err := ListPods(context.Background(), sock)
	if err != nil || len(names) != 2 || names[0] != "ai/train" || names[1] != "ai/web" {
		t.Fatalf("ListPods: %v, %v", names, err)
	}
}
