package nrihook

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
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
	return New(rules(), f, 10*time.Millisecond, obs, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil))), obs
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
		// Through envFrom or the image, as much as through env.
		{&api.Container{Name: "app", Env: []string{"GPU_CORE_UTILIZATION_POLICY=disable"}}, "sets GPU_CORE_UTILIZATION_POLICY"},
		{&api.Container{Name: "app", Env: []string{"LD_PRELOAD=/x.so"}}, "sets LD_PRELOAD"},
		{&api.Container{Name: "app", Env: []string{"CUDA_VISIBLE_DEVICES=1,0"}}, "sets CUDA_VISIBLE_DEVICES"},
	} {
		if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), tc.ctr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: err = %v, want %q", tc.ctr.Env, err, tc.want)
		}
	}
}

// The core policies the webhook injects are a pod's to set; a container
// granted no GPU owns its slice names (a preload of its own allocator).
func TestValuesAndContainersAPodMayChoose(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, _ := testHook(victim)
	for _, policy := range []string{"default", "force"} {
		ctr := &api.Container{Name: "app", Env: []string{"GPU_CORE_UTILIZATION_POLICY=" + policy}}
		if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), ctr); err != nil {
			t.Errorf("core policy %s: %v", policy, err)
		}
	}
	plain := gpuPod("plain", "")
	plain.Spec.Containers = plain.Spec.Containers[1:]
	h, _ = testHook(plain)
	ctr := &api.Container{Name: "sidecar", Env: []string{"LD_PRELOAD=/usr/lib/libjemalloc.so.2", "CUDA_VISIBLE_DEVICES=0"}}
	adj, _, err := h.CreateContainer(context.Background(), sandbox(plain), ctr)
	if err != nil {
		t.Fatalf("a container granted no GPU with a preload: %v", err)
	}
	if env := envAfter(ctr, adj); env["NVIDIA_VISIBLE_DEVICES"] != "void" || env["LD_PRELOAD"] != "/usr/lib/libjemalloc.so.2" {
		t.Errorf("env = %v, want its preload kept and no device", env)
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

// Stopping waits for the call being answered, and no longer than max.
func TestDrainWaitsForTheCallInFlight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wait, max time.Duration // the call's wait for its pod; drain's bound
		want      time.Duration
	}{
		{"the call ends first", 10 * time.Millisecond, time.Second, 10 * time.Millisecond},
		{"max runs out first", time.Hour, time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, _ := testHook() // the informer never shows the pod
				h.wait = tc.wait
				ghost := gpuPod("ghost", "GPU-0")
				answered := make(chan struct{})
				go func() {
					_, _, _ = h.CreateContainer(context.Background(), sandbox(ghost), &api.Container{Name: "app"})
					close(answered)
				}()
				synctest.Wait() // the call waits for the pod
				start := time.Now()
				h.drain(tc.max)
				if took := time.Since(start); took != tc.want {
					t.Errorf("drain returned after %v, want %v", took, tc.want)
				}
				if _, _, err := h.CreateContainer(context.Background(), sandbox(ghost), &api.Container{Name: "app"}); err == nil || !strings.Contains(err.Error(), "is stopping") {
					t.Errorf("a call while stopping: err = %v", err)
				}
				<-answered
			})
		})
	}
}

// While the node reads the settings its slices depend on (per-node
// overrides chosen by label), the hook is connected and answers: exempt
// and GPU-less containers as ever, a slice refused for kubelet to retry;
// once settled, the slice has the settled options.
func TestAHeldHookRefusesSlicesUntilSettled(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	exempt := gpuPod("operator", "")
	exempt.Namespace, exempt.Spec.ServiceAccountName = "agents", "dcgm"
	h, obs := testHook(victim, exempt)
	h.Hold("is reading its node's labels")
	_, _, err := h.CreateContainer(context.Background(), sandbox(victim), &api.Container{Name: "app"})
	if err == nil || !strings.Contains(err.Error(), `is reading its node's labels, so it cannot grant container "app" its slice yet; kubelet retries`) {
		t.Fatalf("held: %v", err)
	}
	if _, _, err := h.CreateContainer(context.Background(), sandbox(exempt), &api.Container{Name: "app"}); err != nil {
		t.Errorf("a GPU agent's container, held: %v", err)
	}
	opts := rules().Slice
	opts.Oversubscribe = true
	h.Settle(opts)
	ctr := &api.Container{Name: "app"}
	adj, _, err := h.CreateContainer(context.Background(), sandbox(victim), ctr)
	if err != nil {
		t.Fatal(err)
	}
	if env := envAfter(ctr, adj); env["NVIDIA_VISIBLE_DEVICES"] != "GPU-0" || env["CUDA_OVERSUBSCRIBE"] != "true" {
		t.Errorf("settled: env %v", env)
	}
	if strings.Join(obs.verdicts, ",") != "refuse,exempt,grant" {
		t.Errorf("verdicts %v", obs.verdicts)
	}
}

// Run ends once its context does, the hook drained: with no runtime to
// connect to, it was retrying, and must stop at once rather than keep the
// role from stopping.
func TestRunEndsWithItsContext(t *testing.T) {
	h, _ := testHook()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, t.TempDir()+"/no-runtime.sock") }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(2 * drainMax):
		t.Fatalf("Run still running %v after its context ended", 2*drainMax)
	}
}

// A hook that has begun to drain does not connect again: the new
// connection would only refuse, and closing it would let the runtime
// call the closed plugin once more and take that call as answered.
func TestRunDoesNotConnectOnceDraining(t *testing.T) {
	h, _ := testHook()
	h.drain(0)
	done := make(chan error, 1)
	go func() { done <- h.Run(context.Background(), t.TempDir()+"/no-runtime.sock") }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(drainMax):
		t.Fatalf("Run of a draining hook still retrying the runtime after %v", drainMax)
	}
	if up, conns := h.Connected(); up || conns != 0 {
		t.Errorf("connected %v, %d connections", up, conns)
	}
}
