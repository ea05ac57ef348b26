package nrihook

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
)

type fakePods map[string]*corev1.Pod

func (f fakePods) Get(ns, name string) *corev1.Pod { return f[ns+"/"+name] }
func (f fakePods) Changed() <-chan struct{}        { return make(chan struct{}) }
func (f fakePods) HasSynced() bool                 { return true }

type nopObserver struct{ verdicts []string }

func (o *nopObserver) RuntimeHook(v string, _ time.Duration) { o.verdicts = append(o.verdicts, v) }

func testHook(pods ...*corev1.Pod) (*Hook, *nopObserver) {
	f := fakePods{}
	for _, p := range pods {
		f[p.Namespace+"/"+p.Name] = p
	}
	obs := &nopObserver{}
	return New(rules(), f, 10*time.Millisecond, obs, slog.New(slog.NewTextHandler(io.Discard, nil))), obs
}

func sandbox(p *corev1.Pod) *api.PodSandbox {
	return &api.PodSandbox{Namespace: p.Namespace, Name: p.Name, Uid: string(p.UID)}
}

// envAfter is the container's env once the runtime applied adj, the way
// the runtime's adaptation does: removals, then additions replacing.
func envAfter(ctr *api.Container, adj *api.ContainerAdjustment) map[string]string {
	env := map[string]string{}
	for _, kv := range ctr.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if adj == nil {
		return env
	}
	for _, kv := range adj.Env {
		env[kv.Key] = kv.Value
	}
	return env
}

func TestPodEnvCannotWidenTheSlice(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, obs := testHook(victim)
	// What the image or the pod set once is replaced.
	ctr := &api.Container{Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=all", "CUDA_DEVICE_MEMORY_LIMIT_0=80000m", "CUDA_DEVICE_MEMORY_LIMIT_1=80000m", "CUDA_OVERSUBSCRIBE=true", "PATH=/bin"}}
	adj, _, err := h.CreateContainer(context.Background(), sandbox(victim), ctr)
	if err != nil {
		t.Fatal(err)
	}
	env := envAfter(ctr, adj)
	if env["NVIDIA_VISIBLE_DEVICES"] != "GPU-0" || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" || env["CUDA_OVERSUBSCRIBE"] != "false" || env["PATH"] != "/bin" {
		t.Errorf("env = %v", env)
	}
	if obs.verdicts[0] != "grant" {
		t.Errorf("verdicts = %v", obs.verdicts)
	}
	if r := h.Records()[victim.UID]; r.Granted["app"] != "GPU-0" {
		t.Errorf("record = %+v", r)
	}
	// What NRI cannot replace is refused: a name set twice (kubelet's
	// device env, then the pod's), a slice name the slice does not set,
	// the NVIDIA runtime's device-list mount.
	for _, tc := range []struct {
		ctr  *api.Container
		want string
	}{
		{&api.Container{Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all"}}, "sets NVIDIA_VISIBLE_DEVICES"},
		{&api.Container{Name: "app", Env: []string{"CUDA_TASK_PRIORITY=0"}}, "sets CUDA_TASK_PRIORITY"},
		{&api.Container{Name: "app", Mounts: []*api.Mount{{Destination: "/var/run/nvidia-container-devices/all"}}}, "mounts /var/run/nvidia-container-devices/all"},
		{&api.Container{Name: "app", Mounts: []*api.Mount{{Destination: "/var/run/nvidia-container-devicesall"}}}, "mounts /var/run/nvidia-container-devicesall"},
		// HAMi-core prefers the per-GPU core limit to the one vgpud sets.
		{&api.Container{Name: "app", Env: []string{"CUDA_DEVICE_SM_LIMIT_0=100"}}, "sets CUDA_DEVICE_SM_LIMIT_0"},
		// The NVIDIA runtime adds InfiniBand devices beside a GPU.
		{&api.Container{Name: "app", Env: []string{"NVIDIA_MOFED=enabled"}}, "sets NVIDIA_MOFED"},
	} {
		if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), tc.ctr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: err = %v, want %q", tc.ctr.Env, err, tc.want)
		}
	}
}

// A pod admitted before its node ran NRI restarts its container with
// kubelet's replayed device env: the same grant, set twice, is kept.
func TestTheSameGrantTwiceIsKept(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, _ := testHook(victim)
	ctr := &api.Container{Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=GPU-0", "CUDA_DEVICE_MEMORY_LIMIT_1=5m", "CUDA_DEVICE_SM_LIMIT_3=100"}}
	if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), ctr); err != nil {
		t.Fatalf("a duplicate whose last value is the grant, and per-GPU limits past its one GPU: %v", err)
	}
}

func TestImageEnvWithoutABookingIsVoided(t *testing.T) {
	plain := gpuPod("plain", "")
	plain.Spec.Containers = plain.Spec.Containers[1:]
	h, _ := testHook(plain)
	ctr := &api.Container{Name: "sidecar", Env: []string{"NVIDIA_VISIBLE_DEVICES=all", "CUDA_DEVICE_SM_LIMIT=100"}}
	adj, _, err := h.CreateContainer(context.Background(), sandbox(plain), ctr)
	if err != nil {
		t.Fatal(err)
	}
	// The limits without a device limit nothing; the device goes.
	if env := envAfter(ctr, adj); env["NVIDIA_VISIBLE_DEVICES"] != "void" {
		t.Errorf("env = %v, want NVIDIA_VISIBLE_DEVICES=void", env)
	}
}

func TestAnAttackerIsRefused(t *testing.T) {
	attacker := gpuPod("attacker", "")
	h, _ := testHook(attacker)
	_, _, err := h.CreateContainer(context.Background(), sandbox(attacker), &api.Container{Name: "app", Env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-0"}})
	if err == nil || !strings.Contains(err.Error(), "vgpud assigned it no GPUs") {
		t.Fatalf("err = %v", err)
	}
	if r := h.Records()[attacker.UID]; r.Refused["app"] == "" {
		t.Errorf("record = %+v", r)
	}
}

func TestAStoppingHookRefusesEveryCall(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, _ := testHook(victim)
	h.drain(time.Second)
	if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), &api.Container{Name: "app"}); err == nil || !strings.Contains(err.Error(), "is stopping") {
		t.Fatalf("err = %v", err)
	}
}
