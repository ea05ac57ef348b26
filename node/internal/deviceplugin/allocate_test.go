package deviceplugin

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func allocate(p *Plugin, devIDs []string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devIDs}}})
	if err != nil {
		return nil, err
	}
	return resp.ContainerResponses[0], nil
}

func TestAllocateInitThenAppContainers(t *testing.T) {
	g := testGPUs(8)
	pod := boundPod("train", "n1", [][]string{{g[0].UUID}}, [][]string{{g[1].UUID, g[2].UUID}}, []int64{1000, 3000})
	pods := newFakePods(pod)
	phases := newFakePhases(nil, 0)
	p := testPlugin(t, pods, phases)

	r, err := allocate(p, ids(g[0].UUID))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": g[0].UUID, "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_SM_LIMIT": "10"}
	for k, v := range want {
		if r.Envs[k] != v {
			t.Errorf("init container %s=%q, want %q", k, r.Envs[k], v)
		}
	}
	if got := phases.phases("default/train"); len(got) != 0 {
		t.Errorf("phase written after the first of two containers: %v", got)
	}
	// kubelet hands the app container the device the init container
	// released: IDs from any of the pod's GPUs are accepted, and the
	// assignment says which GPUs the container gets.
	r, err = allocate(p, ids(g[0].UUID, g[2].UUID))
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"NVIDIA_VISIBLE_DEVICES": g[1].UUID + "," + g[2].UUID, "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "3000m", "CUDA_DEVICE_SM_LIMIT": "20"}
	for k, v := range want {
		if r.Envs[k] != v {
			t.Errorf("app container %s=%q, want %q", k, r.Envs[k], v)
		}
	}
	if r.Envs[containerenv.EnvOversubscribe] != "false" {
		t.Errorf("CUDA_OVERSUBSCRIBE=%q without memory scaling, want false", r.Envs[containerenv.EnvOversubscribe])
	}
	if got := phases.phases("default/train"); len(got) != 1 || got[0] != protocol.PhaseAllocated {
		t.Errorf("phases written = %v, want [allocated]", got)
	}
	// The pod is done; a further Allocate must not reuse it.
	if _, err := allocate(p, ids(g[0].UUID)); err == nil {
		t.Error("a third Allocate was served from a pod already allocated")
	}
}

func TestAllocateWithoutBoundPodNamesNodeCountAndPods(t *testing.T) {
	g := testGPUs(8)
	done := boundPod("done", "n1", nil, [][]string{{g[0].UUID}}, []int64{1000})
	done.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	other := boundPod("elsewhere", "n2", nil, [][]string{{g[1].UUID}}, []int64{1000})
	p := testPlugin(t, newFakePods(done, other), newFakePhases(nil, 0))
	start := time.Now()
	_, err := allocate(p, ids(g[0].UUID, g[1].UUID))
	if err == nil {
		t.Fatal("Allocate with no bound pod succeeded")
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("code %v, want FailedPrecondition", status.Code(err))
	}
	for _, want := range []string{"node n1", "2 device(s)", "default/done (allocated)", `default/elsewhere (spec.nodeName is "n2")`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("gave up after %v without waiting for the informer", waited)
	}
}

func TestAllocateWaitsForTheInformer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := testGPUs(8)
		pods := newFakePods()
		p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: 5 * time.Second}, g, pods, newFakePhases(nil, 0), nil, clock.RealClock{}, quietLog())
		type result struct {
			r   *pluginapi.ContainerAllocateResponse
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := allocate(p, ids(g[3].UUID))
			done <- result{r, err}
		}()
		synctest.Wait() // Allocate waits: nothing is bound yet
		start := time.Now()
		pods.put(boundPod("late", "n1", nil, [][]string{{g[3].UUID}}, []int64{2048}))
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.r.Envs["NVIDIA_VISIBLE_DEVICES"] != g[3].UUID {
			t.Errorf("got %v", res.r.Envs)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("answered %v after the informer showed the pod, want at once", took)
		}
	})
}

func TestAllocateCountMismatchFailsThePod(t *testing.T) {
	g := testGPUs(8)
	phases := newFakePhases(nil, 0)
	p := testPlugin(t, newFakePods(boundPod("two", "n1", nil, [][]string{{g[0].UUID, g[1].UUID}}, []int64{1000})), phases)
	_, err := allocate(p, ids(g[0].UUID))
	if err == nil || !strings.Contains(err.Error(), "assigned 2 GPU(s) by vgpud, but kubelet asks for 1") {
		t.Fatalf("err = %v", err)
	}
	got := phases.phases("default/two")
	if len(got) != 1 {
		t.Fatalf("phases = %v", got)
	}
	if reason, ok := got[0].IsFailed(); !ok || !strings.Contains(reason, "asks for 1") {
		t.Errorf("phase = %q, want failed with the reason", got[0])
	}
}

// countingObserver records the outcomes the node's metrics are fed.
type countingObserver struct {
	mu                  sync.Mutex
	allocated, refused  int
	registered, failing int
}

func (c *countingObserver) Allocated(ok bool, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.allocated++
	} else {
		c.refused++
	}
}

func (c *countingObserver) Registered(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.registered++
	} else {
		c.failing++
	}
}

// Devices of a GPU the pod was not assigned are refused, and the pod is
// marked failed with the reason, rather than run with GPUs kubelet did not
// give it.
func TestAllocateRefusesDevicesOutsideTheAssignment(t *testing.T) {
	g := testGPUs(8)
	phases := newFakePhases(nil, 0)
	p := testPlugin(t, newFakePods(boundPod("one", "n1", nil, [][]string{{g[2].UUID}}, []int64{1000})), phases)
	_, err := allocate(p, ids(g[5].UUID))
	if err == nil || !strings.Contains(err.Error(), "not slices of the GPUs vgpud assigned pod default/one") {
		t.Fatalf("err = %v", err)
	}
	if got := phases.phases("default/one"); len(got) != 1 {
		t.Fatalf("phases %v, want one failure", got)
	} else if _, failed := got[0].IsFailed(); !failed {
		t.Fatalf("phase %q, want failed", got[0])
	}
}

// A pod whose assignment names this node but which kube-scheduler bound
// elsewhere (or nowhere) is never served.
func TestAllocateOnlyForPodsBoundToThisNode(t *testing.T) {
	g := testGPUs(8)
	squat := boundPod("squat", "n1", nil, [][]string{{g[1].UUID}}, []int64{1000})
	squat.Spec.NodeName = ""
	p := testPlugin(t, newFakePods(squat), newFakePhases(nil, 0))
	if _, err := allocate(p, ids(g[1].UUID)); err == nil || !strings.Contains(err.Error(), `default/squat (spec.nodeName is "")`) {
		t.Fatalf("err = %v", err)
	}
}

// An assignment asking more memory than the GPU has (only a forged one
// could) never reaches a container's env.
func TestAllocateRefusesASliceLargerThanTheGPU(t *testing.T) {
	g := testGPUs(8)
	phases := newFakePhases(nil, 0)
	p := testPlugin(t, newFakePods(boundPod("big", "n1", nil, [][]string{{g[3].UUID}}, []int64{81921})), phases)
	_, err := allocate(p, ids(g[3].UUID))
	if err == nil || !strings.Contains(err.Error(), `node n1: pod default/big: container "app0" asks 81921 MiB of GPU `+g[3].UUID+", which has 81920 MiB") {
		t.Fatalf("err = %v", err)
	}
	if got := phases.phases("default/big"); len(got) != 1 {
		t.Fatalf("phases %v, want one failure", got)
	} else if _, failed := got[0].IsFailed(); !failed {
		t.Fatalf("phase %q, want failed", got[0])
	}
}

func TestAllocateOutcomesAreObserved(t *testing.T) {
	g := testGPUs(8)
	obs := &countingObserver{}
	pods := newFakePods(boundPod("one", "n1", nil, [][]string{{g[2].UUID}}, []int64{1000}))
	p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: 100 * time.Millisecond}, g, pods, newFakePhases(nil, 0), obs, clock.RealClock{}, quietLog())
	if _, err := allocate(p, ids(g[2].UUID)); err != nil {
		t.Fatal(err)
	}
	if _, err := allocate(p, ids(g[5].UUID)); err == nil {
		t.Fatal("an Allocate for no bound pod succeeded")
	}
	if obs.allocated != 1 || obs.refused != 1 {
		t.Fatalf("observed %d allocated, %d refused; want 1 and 1", obs.allocated, obs.refused)
	}
}

func TestAllocateTwoBoundPodsNeverGuesses(t *testing.T) {
	g := testGPUs(8)
	a := boundPod("a", "n1", nil, [][]string{{g[0].UUID}}, []int64{1000})
	b := boundPod("b", "n1", nil, [][]string{{g[1].UUID}}, []int64{2000})
	p := testPlugin(t, newFakePods(a, b), newFakePhases(nil, 0))
	// IDs from a's GPU say which pod this is.
	r, err := allocate(p, ids(g[0].UUID))
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Errorf("got b's share: %v", r.Envs)
	}
	c := boundPod("c", "n1", nil, [][]string{{g[1].UUID}}, []int64{3000})
	p = testPlugin(t, newFakePods(b, c), newFakePhases(nil, 0))
	// b and c share a GPU: the IDs cannot tell them apart.
	if _, err := allocate(p, ids(g[1].UUID)); err == nil || !strings.Contains(err.Error(), "default/b, default/c") {
		t.Fatalf("err = %v, want an error naming both pods", err)
	}
}

func TestAllocateEnvOptions(t *testing.T) {
	g := testGPUs(8)
	pod := boundPod("prio", "n1", nil, [][]string{{g[0].UUID}}, []int64{1000})
	pod.Spec.Containers[0].Resources.Limits["nvidia.com/priority"] = *resourceQty(1)
	dir := t.TempDir()
	if err := grant.PrepareInterposer(dir); err == nil {
		t.Fatal("PrepareInterposer accepted a directory without libvgpu.so")
	}
	writeFile(t, dir+"/libvgpu.so", "")
	if err := grant.PrepareInterposer(dir); err != nil {
		t.Fatal(err)
	}
	p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, Oversubscribe: true, Interposer: dir, ResolveWait: time.Second}, g, newFakePods(pod), newFakePhases(nil, 0), nil, clock.RealClock{}, quietLog())
	r, err := allocate(p, ids(g[0].UUID))
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs["CUDA_TASK_PRIORITY"] != "1" || r.Envs["CUDA_OVERSUBSCRIBE"] != "true" || !strings.HasSuffix(r.Envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"], "uid-prio.cache") {
		t.Errorf("env = %v", r.Envs)
	}
	if len(r.Mounts) != 3 || r.Mounts[0].ContainerPath != "/usr/local/vgpu/libvgpu.so" || r.Mounts[1].ContainerPath != "/etc/ld.so.preload" || !r.Mounts[0].ReadOnly {
		t.Errorf("mounts = %v", r.Mounts)
	}
	if got := readFile(t, dir+"/ld.so.preload"); got != "/usr/local/vgpu/libvgpu.so\n" {
		t.Errorf("ld.so.preload = %q", got)
	}
}

func TestGetPreferredAllocation(t *testing.T) {
	g := testGPUs(8)
	var avail []string
	for _, x := range g {
		for n := range 10 {
			avail = append(avail, deviceID(x.UUID, n))
		}
	}
	prefer := func(p *Plugin, must []string, size int) []string {
		resp, err := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, MustIncludeDeviceIDs: must, AllocationSize: int32(size)}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerResponses[0].DeviceIDs
	}
	// With a bound pod: slices of its GPUs.
	p := testPlugin(t, newFakePods(boundPod("x", "n1", nil, [][]string{{g[6].UUID, g[2].UUID}}, []int64{1000})), newFakePhases(nil, 0))
	got := prefer(p, nil, 2)
	if len(got) != 2 || !strings.HasPrefix(got[0], g[6].UUID) || !strings.HasPrefix(got[1], g[2].UUID) {
		t.Errorf("preferred %v, want slices of GPUs 6 and 2", got)
	}
	// Without: distinct GPUs on one NUMA node, must-include first.
	p = testPlugin(t, newFakePods(), newFakePhases(nil, 0))
	got = prefer(p, []string{deviceID(g[5].UUID, 3)}, 3)
	if len(got) != 3 || got[0] != deviceID(g[5].UUID, 3) {
		t.Fatalf("preferred %v", got)
	}
	seen := map[string]bool{}
	for _, id := range got {
		uuid, _ := splitID(id)
		if seen[uuid] || p.numa[uuid] != 1 {
			t.Errorf("preferred %v: want 3 distinct GPUs on NUMA node 1", got)
		}
		seen[uuid] = true
	}
}

func TestListAndWatchDevicesFollowHealth(t *testing.T) {
	g := testGPUs(8)
	p := testPlugin(t, newFakePods(), newFakePhases(nil, 0))
	devs, changed := p.Devices()
	if len(devs) != 80 || devs[0].Topology.Nodes[0].ID != 0 || devs[79].Topology.Nodes[0].ID != 1 {
		t.Fatalf("got %d devices; first NUMA %v, last %v", len(devs), devs[0].Topology, devs[79].Topology)
	}
	p.SetUnhealthy(map[string]bool{g[3].UUID: true})
	select {
	case <-changed:
	default:
		t.Fatal("health change not signalled")
	}
	devs, _ = p.Devices()
	if len(devs) != 70 {
		t.Fatalf("%d devices with one GPU unhealthy, want 70", len(devs))
	}
	for _, d := range devs {
		if strings.HasPrefix(d.ID, g[3].UUID) {
			t.Errorf("unhealthy GPU still advertised: %s", d.ID)
		}
	}
}

// lawStream is ListAndWatch's server stream, for a direct call.
type lawStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan []*pluginapi.Device
}

func (s *lawStream) Send(r *pluginapi.ListAndWatchResponse) error { s.sent <- r.Devices; return nil }
func (s *lawStream) Context() context.Context                     { return s.ctx }

func TestDirectRPCs(t *testing.T) {
	g := testGPUs(8)
	p := testPlugin(t, newFakePods(), newFakePhases(nil, 0))
	opts, err := p.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable || opts.PreStartRequired {
		t.Errorf("options %+v, %v", opts, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &lawStream{ctx: ctx, sent: make(chan []*pluginapi.Device, 4)}
	done := make(chan error, 1)
	go func() { done <- p.ListAndWatch(&pluginapi.Empty{}, s) }()
	if got := <-s.sent; len(got) != 80 {
		t.Fatalf("first list %d devices", len(got))
	}
	p.SetUnhealthy(map[string]bool{g[0].UUID: true, g[1].UUID: true})
	if got := <-s.sent; len(got) != 60 {
		t.Fatalf("after two GPUs turned unhealthy: %d devices", len(got))
	}
	p.SetUnhealthy(map[string]bool{})
	if got := <-s.sent; len(got) != 80 {
		t.Fatalf("after recovery: %d devices", len(got))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ListAndWatch ended with %v", err)
	}
}

// Draining waits for an Allocate in flight before the server stops.
func TestIdleWaitsForAllocateInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := testGPUs(8)
		p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: 300 * time.Millisecond}, g, newFakePods(), newFakePhases(nil, 0), nil, clock.RealClock{}, quietLog())
		started := time.Now()
		go func() { _, _ = allocate(p, ids(g[0].UUID)) }() // waits 300 ms for a bound pod that never comes
		synctest.Wait()                                    // it is in flight
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if !p.idle(ctx) {
			t.Fatal("idle gave up with 2 s left")
		}
		if waited := time.Since(started); waited < 300*time.Millisecond {
			t.Fatalf("idle returned after %v, before the Allocate in flight (300 ms) finished", waited)
		}
	})
}

// A pod the leader bound just before it read "draining" appears during the
// quiet period; the plugin keeps waiting until it is allocated.
func TestSettledCatchesABindDuringTheQuietPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := testGPUs(8)
		pods := newFakePods()
		fc := clocktesting.NewFakeClock(time.Now())
		p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: time.Second}, g, pods, newFakePhases(nil, 0), nil, fc, quietLog())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan string, 1)
		returned := func() (string, bool) {
			synctest.Wait() // settled has done what it can
			select {
			case w := <-done:
				return w, true
			default:
				return "", false
			}
		}
		go func() { done <- p.settled(ctx, 300*time.Millisecond) }()
		synctest.Wait()
		fc.Step(100 * time.Millisecond)
		late := boundPod("late", "n1", nil, [][]string{{g[0].UUID}}, []int64{1000})
		pods.put(late)
		fc.Step(200 * time.Millisecond) // the quiet period is over
		if w, ok := returned(); ok {
			t.Fatalf("settled returned %q with a bound pod not yet allocated", w)
		}
		fc.Step(time.Hour)
		if w, ok := returned(); ok {
			t.Fatalf("settled returned %q an hour on with a bound pod not yet allocated", w)
		}
		pods.setPhase(late.UID, protocol.PhaseAllocated)
		if w, ok := returned(); !ok {
			t.Fatal("settled did not return after the pod was allocated")
		} else if w != "" {
			t.Fatalf("settled returned %q after the pod was allocated", w)
		}
		// With nothing bound it still keeps serving for the whole quiet period.
		go func() { done <- p.settled(ctx, 200*time.Millisecond) }()
		synctest.Wait()
		fc.Step(200*time.Millisecond - time.Nanosecond)
		if w, ok := returned(); ok {
			t.Fatalf("settled returned %q before the 200 ms quiet period ended", w)
		}
		fc.Step(time.Nanosecond)
		if w, ok := returned(); !ok || w != "" {
			t.Fatalf("settled returned %q, %v when the 200 ms quiet period ended, want \"\", true", w, ok)
		}
	})
}

// Where the runtime names pods, Allocate picks none: it answers nothing
// for the container, whichever pod is bound, and writes no phase.
func TestAllocateWhereTheRuntimeNamesPodsPicksNoPod(t *testing.T) {
	g := testGPUs(8)
	phases := newFakePhases(nil, 0)
	pod := boundPod("victim", "n1", nil, [][]string{{g[0].UUID}}, []int64{1000})
	p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: time.Second, RuntimeNamesPods: true}, g, newFakePods(pod), phases, nil, clock.RealClock{}, quietLog())
	r, err := allocate(p, ids(g[0].UUID))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Envs) != 0 || len(r.Mounts) != 0 {
		t.Fatalf("response %v", r)
	}
	if got := phases.phases("default/victim"); len(got) != 0 {
		t.Fatalf("phases written: %v", got)
	}
}
