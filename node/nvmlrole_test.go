package node

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/kubeletapi/fakekubelet"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// smiGPU is one GPU as nvidia-smi reports it: the test's independent
// account of the machine.
type smiGPU struct {
	uuid, name, busID string
	memoryMiB         int64
}

// nvmlRole is a node role on the real driver, serving a fake kubelet.
type nvmlRole struct {
	cfg     Config
	kube    *fake.Clientset
	kubelet *fakekubelet.Kubelet
	lists   chan []*pluginapi.Device
	logs    *lockedBuffer
	stopped chan struct{} // closed when Run returned, with err
	err     error
}

// startNVMLRole starts the node role on NVML and waits until kubelet has
// its registration; cleanup stops it and logs what it said.
func startNVMLRole(t *testing.T, tune func(*Config)) *nvmlRole {
	t.Helper()
	dir := t.TempDir()
	r := &nvmlRole{lists: make(chan []*pluginapi.Device, 64), logs: &lockedBuffer{}}
	var err error
	if r.kubelet, err = fakekubelet.Start(dir, r.lists); err != nil {
		t.Fatal(err)
	}
	r.kube = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r.cfg = DefaultConfig()
	r.cfg.GPUs.GPUBackend, r.cfg.Plugin.DevicePluginDir, r.cfg.Inspect.InspectSocket = "nvml", dir, filepath.Join(dir, "inspect.sock")
	r.cfg.Plugin.AllocateWait, r.cfg.Plugin.PodResourcesSocket = 2*time.Second, "" // the fake kubelet has no PodResources
	r.cfg.Identity.NRISocket = filepath.Join(dir, "no-nri.sock")                   // the guessing path, whatever this machine runs
	r.cfg.Runtime.RuntimeConfig = ""                                               // no runtime check: this machine's files are not the test's
	tune(&r.cfg)
	a := NewRole(r.cfg, "n1", wellknown.DefaultResourceNames(), API{Core: unstreamed{r.kube.CoreV1()}, Events: r.kube.EventsV1()}, noLeader{}, "node", prometheus.NewRegistry(), clock.RealClock{}, slog.New(slog.NewTextHandler(r.logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	r.stopped = make(chan struct{})
	start := time.Now()
	go func() {
		defer close(r.stopped)
		r.err = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.stopped:
			if r.err != nil {
				t.Errorf("Run: %v", r.err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the node role did not stop within 30s")
		}
		r.kubelet.Stop()
		t.Logf("node role's log:\n%s", r.logs.String())
	})
	select {
	case <-r.kubelet.Registrations:
		t.Logf("registered with kubelet %v after start", time.Since(start))
	case <-r.stopped:
		t.Fatal("the node role stopped before registering")
	case <-time.After(30 * time.Second):
		t.Fatal("no registration within 30s")
	}
	// A fault made before the watcher registers for XID events is lost.
	r.waitLog(t, `msg="watching GPU health through XID events"`)
	return r
}

// allocate binds a pod to a slice of one GPU, as the leader would, and
// has kubelet allocate it a device of that GPU.
func (r *nvmlRole) allocate(t *testing.T, uuid string, mem int64, cores int) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	ctx := context.Background()
	raw, _ := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: uuid, MemoryMiB: mem, Cores: cores}}}}})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job", UID: "u1", Annotations: map[string]string{wellknown.AnnotationAssignment: raw, wellknown.AnnotationPhase: string(protocol.PhaseBound)}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
	}
	if _, err := r.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, err := r.kubelet.Allocate(ctx, []string{uuid + "-0"})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// list is the next device list the plugin sent kubelet.
func (r *nvmlRole) list(t *testing.T) []*pluginapi.Device {
	t.Helper()
	select {
	case devs := <-r.lists:
		return devs
	case <-r.stopped:
		t.Fatal("the node role stopped")
	case <-time.After(30 * time.Second):
		t.Fatal("no device list within 30s")
	}
	return nil
}

func (r *nvmlRole) inventory(t *testing.T, ok func(protocol.Inventory) bool) protocol.Inventory {
	t.Helper()
	return waitInventory(t, r.kube, ok)
}

// waitLog waits up to 10 s for the node role to log line.
func (r *nvmlRole) waitLog(t *testing.T, line string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return strings.Contains(r.logs.String(), line), nil }); err != nil {
		t.Errorf("the node role did not log %s within 10s", line)
	}
}

// fault runs VGPUD_TEST_NVML_FAULT, if set, on the GPU uuid alone, and
// reports whether it did.
func fault(t *testing.T, uuid string) bool {
	t.Helper()
	cmd := os.Getenv("VGPUD_TEST_NVML_FAULT")
	if cmd == "" {
		return false
	}
	c := exec.Command("sh", "-c", cmd)
	c.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+uuid)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	t.Logf("%s: %s", cmd, out)
	return true
}

// nvidiaSMI lists the machine's GPUs in index order, skipping the test
// unless VGPUD_TEST_NVML=1 says there is a driver to ask.
func nvidiaSMI(t *testing.T) []smiGPU {
	t.Helper()
	if os.Getenv("VGPUD_TEST_NVML") != "1" {
		t.Skip("set VGPUD_TEST_NVML=1 on a machine with an NVIDIA GPU and driver to run the node role on NVML")
	}
	out, err := exec.Command("nvidia-smi", "--query-gpu=uuid,name,memory.total,pci.bus_id", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	var gpus []smiGPU
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ", ")
		if len(f) != 4 {
			t.Fatalf("nvidia-smi line %q", line)
		}
		mem, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("nvidia-smi memory %q: %v", f[2], err)
		}
		gpus = append(gpus, smiGPU{uuid: f[0], name: f[1], memoryMiB: mem, busID: f[3]})
	}
	t.Logf("nvidia-smi: %s", out)
	return gpus
}

// lockedBuffer collects the node role's log across its goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
