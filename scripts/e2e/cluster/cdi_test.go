//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// cdiDevices is #53 item 1: on a node whose runtime injects CDI devices
// and whose NVIDIA spec names its GPUs (nvidia-ctk cdi generate's index
// names, device nodes of major 195 made here), a GPU pod's container
// gets exactly its GPUs' device nodes, injected by the real containerd
// from the hook's CDI devices, with the slice's env. A device plugin
// that hands the same container another GPU of that very spec is
// refused by the hook, its own granted GPU notwithstanding.
func cdiDevices(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0] // the first node uses the host's CDI directories
	const ns = "e2e-cdi"
	newTenant(t, e, ns)
	asTenant := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)
	n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil || len(inv.GPUs) < 3 {
		t.Fatalf("node %s: %d GPUs, %v; the scenario needs three", node, len(inv.GPUs), err)
	}
	index := map[string]int{}
	for _, g := range inv.GPUs {
		index[g.UUID] = g.Index
	}

	fakeNVIDIASpec(t, inv)

	// What each container sees: its device nodes and its GPU env.
	pod := func(name string, limits corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1",
				Command:   []string{"sh", "-c", "echo DEVICES=$(ls /dev | grep nvidia | sort | tr '\\n' ' '); env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_DEVICE_MEMORY_LIMIT)' | sort; sleep 3600"},
				Resources: corev1.ResourceRequirements{Limits: limits}}},
		}}
	}
	start := time.Now()
	for name, gpus := range map[string]string{"one": "1", "two": "2"} {
		p := pod(name, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), "nvidia.com/gpumem": resource.MustParse("1000")})
		if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	e.waitRunning(t, ns, []string{"one", "two"}, 90*time.Second)
	granted := map[string]bool{}
	for _, name := range []string{"one", "two"} {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil || len(a.Containers) != 1 {
			t.Fatalf("%s's assignment: %v %v", name, a, err)
		}
		var uuids, want []string
		for _, g := range a.Containers[0].GPUs {
			uuids = append(uuids, g.UUID)
			want = append(want, fmt.Sprintf("nvidia%d", index[g.UUID]))
			granted[g.UUID] = true
		}
		want = append(want, "nvidiactl")
		slices.Sort(want)
		var got map[string]string
		harness.Eventually(t, 30*time.Second, name+"'s devices", func() error {
			raw, err := e.kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return err
			}
			got = map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			if got["NVIDIA_VISIBLE_DEVICES"] == "" {
				return fmt.Errorf("no env yet in %q", raw)
			}
			return nil
		})
		if devs := strings.Fields(got["DEVICES"]); !slices.Equal(devs, want) {
			t.Errorf("%s (GPUs %v) sees /dev/%v, want exactly /dev/%v", name, uuids, devs, want)
		}
		if got["NVIDIA_VISIBLE_DEVICES"] != strings.Join(uuids, ",") || got["CUDA_DEVICE_MEMORY_LIMIT_0"] == "" {
			t.Errorf("%s's env %v, want NVIDIA_VISIBLE_DEVICES=%s and its memory limit", name, got, strings.Join(uuids, ","))
		}
		t.Logf("%s: GPUs %v -> /dev/%s, NVIDIA_VISIBLE_DEVICES=%s", name, uuids, strings.Join(strings.Fields(got["DEVICES"]), " /dev/"), got["NVIDIA_VISIBLE_DEVICES"])
	}
	t.Logf("two GPU pods ran with their CDI devices in %s", time.Since(start).Round(time.Millisecond))

	// A forged request: a device plugin hands the container another GPU
	// of the same spec, beside the one vgpud grants it (pinned by UUID to
	// a third GPU, so that the two differ).
	other, own := -1, ""
	for _, g := range inv.GPUs {
		switch {
		case granted[g.UUID]:
		case other < 0:
			other = g.Index
		case own == "":
			own = g.UUID
		}
	}
	if own == "" {
		t.Fatal("fewer than two GPUs of the node are free; the scenario needs them")
	}
	forged := fmt.Sprintf("nvidia.com/gpu=%d", other)
	servePlugin(t, "e2e.example/gpu-forged", filepath.Join(pluginapi.DevicePluginPath, "e2e-cdi-forged.sock"),
		&pluginapi.ContainerAllocateResponse{CdiDevices: []*pluginapi.CDIDevice{{Name: forged}}})
	harness.Eventually(t, 60*time.Second, "kubelet advertising the forged resource", func() error {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q, ok := n.Status.Allocatable["e2e.example/gpu-forged"]; !ok || q.Value() < 1 {
			return fmt.Errorf("allocatable %v", n.Status.Allocatable)
		}
		return nil
	})
	p := pod("forged", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("1000"), "e2e.example/gpu-forged": resource.MustParse("1")})
	p.Annotations = map[string]string{wellknown.AnnotationUseGPUUUID: own}
	if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create forged: %v", err)
	}
	msg := e.refusedByHook(t, ns, "forged", 90*time.Second, "reaches GPUs vgpud did not grant it", "CDI device "+forged, fmt.Sprintf("/dev/nvidia%d", other))
	if strings.Contains(msg, "nvidiactl") {
		t.Errorf("the refusal names the granted GPU's control node: %s", msg)
	}
	t.Logf("forged %s beside its granted GPU %s (/dev/nvidia%d): %s", forged, own, index[own], msg)
}

// fakeNVIDIASpec writes the first node's NVIDIA CDI spec for inv's GPUs,
// as nvidia-ctk cdi generate writes it by default: a device per GPU by
// its index and "all", the control node for every device, each a
// device node of the driver's major made here. The test's end removes
// it.
func fakeNVIDIASpec(t *testing.T, inv protocol.Inventory) {
	t.Helper()
	dir := "/var/lib/vgpud-e2e/cdi"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mknod := func(name string, minor int) string {
		p := filepath.Join(dir, name)
		_ = os.Remove(p)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor)))); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
		return p
	}
	var spec strings.Builder
	spec.WriteString("cdiVersion: \"0.6.0\"\nkind: nvidia.com/gpu\ndevices:\n")
	var all []string
	for _, g := range inv.GPUs {
		node := fmt.Sprintf("{path: /dev/nvidia%d, hostPath: %s}", g.Index, mknod(fmt.Sprintf("nvidia%d", g.Index), g.Index))
		all = append(all, node)
		fmt.Fprintf(&spec, "  - name: \"%d\"\n    containerEdits:\n      deviceNodes: [%s]\n", g.Index, node)
	}
	fmt.Fprintf(&spec, "  - name: all\n    containerEdits:\n      deviceNodes: [%s]\n", strings.Join(all, ", "))
	fmt.Fprintf(&spec, "containerEdits:\n  deviceNodes: [{path: /dev/nvidiactl, hostPath: %s}]\n", mknod("nvidiactl", 255))
	// Not nvidia.yaml: a runner's own spec stays; cluster.sh up removes
	// what an aborted run left (vgpud-e2e-*).
	specPath := "/etc/cdi/vgpud-e2e-nvidia.yaml"
	tmp := specPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(spec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, specPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(specPath)
		_ = os.RemoveAll(dir)
	})
}
