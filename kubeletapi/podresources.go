package kubeletapi

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodDevices is what kubelet's PodResources API says one pod's containers
// got of one resource.
type PodDevices struct {
	Namespace  string
	Name       string
	Containers map[string][]string // container name -> device IDs
}

// ListPodDevices asks kubelet's PodResources API on socket (usually
// /var/lib/kubelet/pod-resources/kubelet.sock) which devices of resource
// each container holds; pods holding none are left out.
func ListPodDevices(ctx context.Context, socket, resource string) ([]PodDevices, error) {
	resp, err := list(ctx, socket)
	if err != nil {
		return nil, err
	}
	var out []PodDevices
	for _, p := range resp.GetPodResources() {
		pd := PodDevices{Namespace: p.GetNamespace(), Name: p.GetName(), Containers: map[string][]string{}}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == resource {
					pd.Containers[c.GetName()] = append(pd.Containers[c.GetName()], d.GetDeviceIds()...)
				}
			}
		}
		if len(pd.Containers) > 0 {
			out = append(out, pd)
		}
	}
	return out, nil
}

// ListPods asks kubelet's PodResources API which pods kubelet itself
// holds, as namespace/name. A kubelet that has just started holds none
// until it has listed its pods from the API server.
func ListPods(ctx context.Context, socket string) ([]string, error) {
	resp, err := list(ctx, socket)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(resp.GetPodResources()))
	for _, p := range resp.GetPodResources() {
		out = append(out, p.GetNamespace()+"/"+p.GetName())
	}
	return out, nil
}

func list(ctx context.Context, socket string) (*podresourcesapi.ListPodResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial kubelet pod-resources at %s: %w", socket, err)
	}
	defer conn.Close()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources at %s: %w", socket, err)
	}
	return resp, nil
}
