//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/scripts/harness"
)

// sideDoor hands a tenant's container an NVIDIA GPU by the ways vgpud's
// env does not cover, through the real kubelet and containerd of the
// first node: a device plugin (another vendor's, or a DRA driver's
// kubelet plugin would do the same) whose Allocate returns a device node
// made with mknod (major 195, the NVIDIA driver's), and one that returns
// a CDI device from a spec written on the node. vgpud's runtime hook
// refuses both containers, saying what reached the GPU.
func sideDoor(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0] // the first node uses the host's kubelet and CDI directories
	ns := "e2e-sidedoor"
	newTenant(t, e, ns)
	asTenant := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)

	dir := "/var/lib/vgpud-e2e/sidedoor"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	devNode := filepath.Join(dir, "nvidia7")
	_ = os.Remove(devNode)
	if err := unix.Mknod(devNode, unix.S_IFCHR|0o666, int(unix.Mkdev(195, 7))); err != nil {
		t.Fatalf("mknod %s: %v", devNode, err)
	}
	spec := "/etc/cdi/vgpud-e2e-sidedoor.yaml"
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(`cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
  - name: e2e
    containerEdits:
      deviceNodes:
        - {path: /dev/nvidia7, hostPath: %s, type: c, major: 195, minor: 7}
`, devNode)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(spec); _ = os.Remove(devNode) })

	plugins := []struct{ resource, socket string }{
		{"e2e.example/gpu-node", "e2e-sidedoor-node.sock"},
		{"e2e.example/gpu-cdi", "e2e-sidedoor-cdi.sock"},
	}
	for _, p := range plugins {
		resp := &pluginapi.ContainerAllocateResponse{}
		if strings.HasSuffix(p.resource, "-node") {
			resp.Devices = []*pluginapi.DeviceSpec{{ContainerPath: "/dev/nvidia7", HostPath: devNode, Permissions: "rw"}}
		} else {
			resp.CdiDevices = []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=e2e"}}
		}
		servePlugin(t, p.resource, filepath.Join(pluginapi.DevicePluginPath, p.socket), resp)
	}
	harness.Eventually(t, 60*time.Second, "kubelet advertising the side-door resources", func() error {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, p := range plugins {
			if q, ok := n.Status.Allocatable[corev1.ResourceName(p.resource)]; !ok || q.Value() < 1 {
				return fmt.Errorf("%s allocatable %v", p.resource, n.Status.Allocatable)
			}
		}
		return nil
	})

	for _, p := range plugins {
		name := strings.TrimPrefix(p.resource, "e2e.example/")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(p.resource): resource.MustParse("1")}}}},
		}}
		if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s as the tenant: %v", name, err)
		}
		msg := e.refusedByHook(t, ns, name, 90*time.Second, "reaches GPUs vgpud did not grant it", "/dev/nvidia7")
		t.Logf("%s (%s): %s", name, p.resource, msg)
	}
}

// servePlugin registers a device plugin for resource with the first
// node's kubelet, with one healthy device whose Allocate answers resp,
// until the test ends.
func servePlugin(t *testing.T, resourceName, socket string, resp *pluginapi.ContainerAllocateResponse) {
	t.Helper()
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &fixedPlugin{resp: resp})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); _ = os.Remove(socket) })

	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(socket), ResourceName: resourceName,
	}); err != nil {
		t.Fatalf("register %s with kubelet: %v", resourceName, err)
	}
}

// fixedPlugin is a device plugin with one device that always answers the
// same allocation.
type fixedPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resp *pluginapi.ContainerAllocateResponse
}

func (p *fixedPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *fixedPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{{ID: "d0", Health: pluginapi.Healthy}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *fixedPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, p.resp)
	}
	return out, nil
}
