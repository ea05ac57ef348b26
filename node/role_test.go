package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/kubeletapi/fakekubelet"
	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

type noLeader struct{}

func (noLeader) Leader() string { return "vgpud-abc" }
func (noLeader) IsLeader() bool { return false }

// A node's overrides reach the parts built before they are read: the
// usage part runs in the mode the node's entry names, not the flags'.
func TestOverridesReachTheUsagePart(t *testing.T) {
	dir := t.TempDir()
	kubelet, err := fakekubelet.Start(dir, make(chan []*pluginapi.Device, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	cfg := DefaultConfig()
	cfg.GPUs.GPUBackend, cfg.Plugin.DevicePluginDir, cfg.Inspect.InspectSocket = "mock:dgxa100", dir, filepath.Join(dir, "inspect.sock")
	cfg.Identity.NRISocket, cfg.Runtime.RuntimeConfig, cfg.Usage.GPUUsageRecord = filepath.Join(dir, "no-nri.sock"), "", ""
	cfg.Overrides.NodeOverrides = filepath.Join(dir, "node-overrides.yaml")
	if err := os.WriteFile(cfg.Overrides.NodeOverrides, []byte("version: v1\nnodes:\n- name: n1\n  gpuUsage: \"off\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := NewRole(cfg, "n1", wellknown.DefaultResourceNames(), API{Core: unstreamed{kube.CoreV1()}, Events: kube.EventsV1()}, noLeader{}, "node", prometheus.NewRegistry(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("the role ended: %v", err)
	case <-kubelet.Registrations:
	case <-time.After(10 * time.Second):
		t.Fatal("no registration within 10s")
	}
	s := waitSnapshot(t, cfg.Inspect.InspectSocket, func(s inspectv1.NodeSnapshot) bool { return s.Use != nil })
	if s.APIVersion != inspectv1.NodeVersion {
		t.Errorf("apiVersion %q, want %q", s.APIVersion, inspectv1.NodeVersion)
	}
	if s.Use.Mode != "off" {
		t.Errorf("usage runs in %q; want off, as the node's override says (the flags say %s)", s.Use.Mode, cfg.Usage.GPUUsage)
	}
	cancel()
	<-done
}

// TestNodeRole runs the whole node role on the mock backend against a fake
// clientset and a fake kubelet: registration, inventory, an Allocate for a
// bound pod answered from the informer with its phase written back, the
// inspect view, and an injected XID flagged in the annotation.
func TestNodeRole(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet, err := fakekubelet.Start(dir, lists)
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	cfg := DefaultConfig()
	cfg.GPUs.GPUBackend, cfg.Plugin.DevicePluginDir, cfg.Inspect.InspectSocket = "mock:dgxa100", dir, filepath.Join(dir, "inspect.sock")
	cfg.Health.HealthRecovery, cfg.Plugin.AllocateWait, cfg.Rescan.RescanInterval = time.Hour, 500*time.Millisecond, 50*time.Millisecond
	// No NRI socket, whatever this machine runs: the guessing path. (The
	// runtime hook is proven against a real containerd in the e2e suite.)
	cfg.Identity.NRISocket = filepath.Join(dir, "no-nri.sock")
	// The runtime check reads a containerd configuration that imports
	// the shipped drop-in.
	cfg.Runtime.RuntimeConfig = "containerd:" + containerdConfig(t, dir)
	a := NewRole(cfg, "n1", wellknown.DefaultResourceNames(), API{Core: unstreamed{kube.CoreV1()}, Events: kube.EventsV1()}, noLeader{}, "node", prometheus.NewRegistry(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	select {
	case r := <-kubelet.Registrations:
		if r.ResourceName != "nvidia.com/gpu" {
			t.Fatalf("registered %q", r.ResourceName)
		}
	case err := <-done:
		t.Fatalf("the role ended before registering: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no registration within 10s")
	}
	if devs := <-lists; len(devs) != 80 {
		t.Fatalf("%d devices, want 80", len(devs))
	}
	inv := waitInventory(t, kube, func(inv protocol.Inventory) bool { return len(inv.GPUs) == 8 })

	// The leader bound a pod here: kubelet admits it.
	uuid := inv.GPUs[4].UUID
	raw, _ := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: 5000, Cores: 30}}}}})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job", UID: "u1", Annotations: map[string]string{wellknown.AnnotationAssignment: raw, wellknown.AnnotationPhase: string(protocol.PhaseBound)}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := kubelet.Allocate(ctx, []string{uuid + "-0"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs["NVIDIA_VISIBLE_DEVICES"] != uuid || r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "5000m" || r.Envs["CUDA_DEVICE_SM_LIMIT"] != "30" {
		t.Errorf("env %v", r.Envs)
	}
	got, _ := kube.CoreV1().Pods("default").Get(ctx, "job", metav1.GetOptions{})
	if got.Annotations[wellknown.AnnotationPhase] != string(protocol.PhaseAllocated) {
		t.Errorf("phase %q, want allocated", got.Annotations[wellknown.AnnotationPhase])
	}
	// A second Allocate with nothing bound fails and says why.
	if _, err := kubelet.Allocate(ctx, []string{uuid + "-1"}); err == nil || !strings.Contains(err.Error(), "node n1") {
		t.Errorf("Allocate with nothing bound: %v", err)
	}

	s := waitSnapshot(t, cfg.Inspect.InspectSocket, func(s inspectv1.NodeSnapshot) bool {
		return len(s.Allocations) == 1 && s.Allocations[0].Phase == "allocated"
	})
	if !s.Ready || s.Registration.Count != 1 || s.Leader != "vgpud-abc" || s.GPUs[4].MemoryUsedMiB != 5000 || s.GPUs[4].SlicesUsed != 1 {
		t.Errorf("snapshot %+v", s)
	}

	// The runtime check: the files fail closed through the drop-in, but
	// no runtime made vgpud's NRI socket, so the verdict waits for one.
	if c := s.RuntimeCheck; c == nil || c.Result != preflight.Unknown || len(c.Files) != 2 || !strings.Contains(strings.Join(c.Problems, "\n"), "no NRI socket") {
		t.Errorf("inspect's runtime check %+v, want unknown, two files, no NRI socket", c)
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var check protocol.RuntimeCheck
	if err := json.Unmarshal([]byte(node.Annotations[wellknown.AnnotationRuntime]), &check); err != nil || check.Result != preflight.Unknown || check.Runtime != "containerd" || len(check.Problems) != 2 {
		t.Errorf("%s=%q (%v)", wellknown.AnnotationRuntime, node.Annotations[wellknown.AnnotationRuntime], err)
	}

	// An XID injected through the inspect socket flags the GPU.
	if err := inspect.InjectXID(ctx, cfg.Inspect.InspectSocket, "2", 79); err != nil {
		t.Fatal(err)
	}
	waitInventory(t, kube, func(inv protocol.Inventory) bool { return !inv.GPUs[2].Healthy })
	if devs := <-lists; len(devs) != 70 {
		t.Errorf("%d devices after XID, want 70", len(devs))
	}

	// A GPU falls off the machine: the rescan serves the seven left,
	// registers again with kubelet, publishes them, and says so on the
	// Node; GPU 2 stays unhealthy through it. Put back, it returns.
	gone := inv.GPUs[7].UUID
	if err := inspect.SetPlugged(ctx, cfg.Inspect.InspectSocket, "7", false); err != nil {
		t.Fatal(err)
	}
	after := waitInventory(t, kube, func(inv protocol.Inventory) bool { return len(inv.GPUs) == 7 })
	if after.GPUs[2].Healthy {
		t.Errorf("GPU 2 healthy again after the rescan: %+v", after.GPUs[2])
	}
	for _, g := range after.GPUs {
		if g.UUID == gone {
			t.Errorf("the unplugged GPU %s is still in the inventory", gone)
		}
	}
	select {
	case <-kubelet.Registrations:
	case <-time.After(10 * time.Second):
		t.Fatal("no registration after the rescan")
	}
	var ids []*pluginapi.Device
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		select {
		case ids = <-lists:
		default:
		}
		return len(ids) == 60, nil // 7 GPUs of 10 slices but GPU 2's, unhealthy
	}); err != nil {
		t.Fatalf("kubelet's list after the rescan has %d devices, want 60", len(ids))
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == "GPUsChanged" && e.Regarding.Kind == "Node" && strings.Contains(e.Note, "gone: "+gone) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Error("no GPUsChanged Event on the Node naming the GPU gone")
	}
	if err := inspect.SetPlugged(ctx, cfg.Inspect.InspectSocket, gone, true); err != nil {
		t.Fatal(err)
	}
	waitInventory(t, kube, func(inv protocol.Inventory) bool { return len(inv.GPUs) == 8 && inv.GPUs[7].UUID == gone })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// waitInventory waits up to 10 s for the node's inventory annotation to
// be as ok wants.
func waitInventory(t *testing.T, kube *fake.Clientset, ok func(protocol.Inventory) bool) protocol.Inventory {
	t.Helper()
	var inv protocol.Inventory
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		inv, err = protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
		return err == nil && ok(inv), nil
	}); err != nil {
		t.Fatal("inventory annotation not as expected within 10s")
	}
	return inv
}

// waitSnapshot waits up to 10 s for the inspect socket to show what ok
// wants.
func waitSnapshot(t *testing.T, socket string, ok func(inspectv1.NodeSnapshot) bool) inspectv1.NodeSnapshot {
	t.Helper()
	var s inspectv1.NodeSnapshot
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		s, err = inspect.Fetch(ctx, socket)
		return err == nil && ok(s), nil
	}); err != nil {
		t.Fatalf("snapshot not as expected: %+v", s)
	}
	return s
}

// unstreamed is the fake's core client saying, as the fake clientset
// itself does, that it cannot stream an informer's initial list.
type unstreamed struct{ corev1client.CoreV1Interface }

func (unstreamed) IsWatchListSemanticsUnSupported() bool { return true }

// containerdConfig writes a containerd config.toml under dir that imports
// vgpud's shipped drop-in, and returns its path.
func containerdConfig(t *testing.T, dir string) string {
	t.Helper()
	dropIn, err := os.ReadFile("../manifests/node-setup/containerd-vgpud.toml")
	if err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "etc-containerd")
	if err := os.MkdirAll(filepath.Join(etc, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "conf.d", "vgpud.toml"), dropIn, 0o644); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(etc, "config.toml")
	if err := os.WriteFile(main, []byte("version = 3\nimports = [\"conf.d/*.toml\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return main
}
