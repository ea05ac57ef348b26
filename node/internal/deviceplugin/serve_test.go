package deviceplugin

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/kubeletapi/fakekubelet"
	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/health"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestServerAgainstFakeKubelet(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet := startKubelet(t, dir, lists)

	lib, err := gpu.Open("mock:dgxa100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	gpus := make([]AdvertisedGPU, len(devs))
	uuids := make([]string, len(devs))
	for i, d := range devs {
		gpus[i], uuids[i] = AdvertisedGPU{UUID: d.UUID, NUMA: d.NUMA, MemoryMiB: d.MemoryMiB}, d.UUID
	}
	p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: time.Second}, gpus, newFakePods(), newFakePhases(nil, 0), nil, clock.RealClock{}, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher := health.NewWatcher(lib, uuids, health.NewTracker(health.DefaultIgnoredXIDs, 300*time.Millisecond), p.SetUnhealthy, clock.RealClock{}, quietLog())
	go watcher.Run(ctx)
	states := make(chan string, 16)
	s := NewServer(p, dir, "vgpud.sock", stateRecorder(states), clock.RealClock{}, quietLog())
	s.quiet = 50 * time.Millisecond
	stopped := make(chan struct{})
	go func() { _ = s.Run(ctx); close(stopped) }()

	r := recv(t, kubelet.Registrations)
	if r.Version != pluginapi.Version || r.Endpoint != "vgpud.sock" || r.ResourceName != "nvidia.com/gpu" || !r.Options.GetPreferredAllocationAvailable {
		t.Fatalf("registration %+v", r)
	}
	if st := recv(t, states); st != wellknown.PluginServing {
		t.Fatalf("after registration the plugin says %q", st)
	}
	first := recv(t, lists)
	if len(first) != 80 {
		t.Fatalf("initial ListAndWatch has %d devices, want 8 GPUs x 10", len(first))
	}
	for _, d := range first {
		if d.Health != pluginapi.Healthy || d.Topology == nil || len(d.Topology.Nodes) != 1 {
			t.Fatalf("device %+v", d)
		}
	}

	// An injected XID takes GPU 3 out; after the quiet period it returns.
	start := time.Now()
	if err := lib.(*gpu.Mock).InjectXID(uuids[3], 79); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, lists); len(got) != 70 {
		t.Fatalf("after XID 79: %d devices, want 70", len(got))
	}
	down := time.Since(start)
	if got := recv(t, lists); len(got) != 80 {
		t.Fatalf("after recovery: %d devices, want 80", len(got))
	}
	t.Logf("XID 79 -> GPU out of ListAndWatch in %v; back after %v (quiet period 300ms)", down.Round(time.Microsecond), time.Since(start).Round(time.Millisecond))

	// Kubelet restarts: sockets wiped, kubelet.sock created again. The
	// plugin sees it go (its stream ends) and serves again on a new
	// socket before kubelet is back.
	kubelet.Stop()
	if st := recv(t, states); st != wellknown.PluginWaiting {
		t.Fatalf("with kubelet gone the plugin says %q, want %q", st, wellknown.PluginWaiting)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, "vgpud.sock"))
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the plugin did not serve again on a new socket: %v", err)
	}
	kubelet = startKubelet(t, dir, lists)
	r = recv(t, kubelet.Registrations)
	seen := time.Since(kubelet.Started)
	if r.Endpoint != "vgpud.sock" {
		t.Fatalf("re-registration %+v", r)
	}
	if got := recv(t, lists); len(got) != 80 {
		t.Fatalf("after re-registration: %d devices", len(got))
	}
	reg := s.Registration()
	t.Logf("kubelet.sock created -> Register received: %v (plugin's own measure %v, %d registrations)", seen.Round(time.Microsecond), reg.Latency.Round(time.Microsecond), reg.Count)
	// kubelet removing our socket as it starts and creating its own are
	// two events, and may be two registrations: let them land.
	for quiet := false; !quiet; {
		select {
		case <-kubelet.Registrations:
		case <-time.After(300 * time.Millisecond):
			quiet = true
		}
	}
	before := s.Registration().Count

	// Our socket removed alone: recreated and registered again.
	if err := os.Remove(filepath.Join(dir, "vgpud.sock")); err != nil {
		t.Fatal(err)
	}
	recv(t, kubelet.Registrations)
	if _, err := os.Stat(filepath.Join(dir, "vgpud.sock")); err != nil {
		t.Fatalf("socket not recreated: %v", err)
	}
	// Nothing else follows: our own socket churn must not loop.
	select {
	case r := <-kubelet.Registrations:
		t.Fatalf("unexpected registration %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if reg := s.Registration(); reg.Count != before+1 || reg.Error != "" {
		t.Errorf("registration record %+v, want %d and no error", reg, before+1)
	}

	// Stopping says draining before the socket goes.
	cancel()
	<-stopped
	var last string
	for len(states) > 0 {
		last = <-states
	}
	if last != wellknown.PluginDraining {
		t.Fatalf("last state on stop %q, want %q", last, wellknown.PluginDraining)
	}
}

// When kubelet's streams end, the leader is told at once to bind nothing
// here (kubelet restarting admits pods against stale device books); when
// kubelet reads the devices again, serving. A kubelet that only dropped
// the plugin is registered with again.
func TestKubeletGoneStopsBinds(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet := startKubelet(t, dir, lists)
	states := make(chan string, 16)
	s := runServer(t, dir, stateRecorder(states), func(s *PluginServer) { s.retry = 200 * time.Millisecond })
	// A kubelet restart registers the plugin twice (its socket removed,
	// kubelet.sock created), each saying serving: wait for the state,
	// never for a count.
	want := func(step, state string) {
		t.Helper()
		if got := recv(t, states); got != state {
			t.Fatalf("%s: the plugin says %q, want %q", step, got, state)
		}
	}
	settle := func() {
		t.Helper()
		for {
			select {
			case st := <-states:
				if st != wellknown.PluginServing {
					t.Fatalf("the plugin says %q with kubelet following it", st)
				}
			case <-time.After(3 * s.retry):
				return
			}
		}
	}
	recv(t, kubelet.Registrations)
	want("registered", wellknown.PluginServing)
	settle()

	start := time.Now()
	kubelet.Stop()
	want("kubelet stopped", wellknown.PluginWaiting)
	t.Logf("kubelet's streams ended -> %q published after %v", wellknown.PluginWaiting, time.Since(start).Round(time.Microsecond))
	kubelet = startKubelet(t, dir, lists)
	recv(t, kubelet.Registrations)
	want("kubelet back", wellknown.PluginServing)
	settle()

	kubelet.DropStreams()
	want("streams dropped", wellknown.PluginWaiting)
	recv(t, kubelet.Registrations)
	want("registered again", wellknown.PluginServing)
	settle()
}

// A kubelet that is restarting (its old socket file still there, nobody
// listening) is not registered with by the retry: the new kubelet gets
// the plugin as soon as it starts, not after a registration timed out.
func TestRetryWaitsOutARestartingKubelet(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet := startKubelet(t, dir, lists)
	logs := &lockedBuffer{}
	runServer(t, dir, nil, func(s *PluginServer) {
		s.retry, s.log = 100*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil))
	})
	recv(t, kubelet.Registrations)
	recv(t, lists)

	// kubelet dies, leaving its socket file; the plugin's retry comes due
	// and finds nobody listening.
	kubelet.Kill()
	foundGone := func(context.Context) (bool, error) {
		return strings.Contains(logs.String(), "kubelet does not answer"), nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait.ForeverTestTimeout, true, foundGone); err != nil {
		t.Fatalf("the retry did not find kubelet gone; the plugin's log:\n%s", logs.String())
	}
	kubelet = startKubelet(t, dir, lists)
	recv(t, kubelet.Registrations)
	select {
	case <-lists:
	case <-time.After(2 * time.Second):
		t.Fatal("the restarted kubelet had no device list 2 s after it started")
	}
	t.Logf("restarted kubelet -> device list in %v", time.Since(kubelet.Started).Round(time.Millisecond))
}

// A restarted kubelet takes the plugin before it has listed its pods:
// serving waits until kubelet lists this replica's pod.
func TestServingWaitsForKubeletsPodList(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet := startKubelet(t, dir, lists)
	states := make(chan string, 16)
	var mu sync.Mutex
	listed := time.Time{} // when kubelet starts listing the pod; zero: not yet
	runServer(t, dir, stateRecorder(states), func(s *PluginServer) {
		s.AwaitKubeletPods("vgpud-system/vgpud-x", func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			if listed.IsZero() || time.Now().Before(listed) {
				return []string{"kube-system/static"}, nil
			}
			return []string{"kube-system/static", "vgpud-system/vgpud-x"}, nil
		})
		mu.Lock()
		listed = time.Now().Add(400 * time.Millisecond)
		mu.Unlock()
	})
	recv(t, kubelet.Registrations)
	if st := recv(t, states); st != wellknown.PluginServing {
		t.Fatalf("the plugin says %q", st)
	}
	mu.Lock()
	early := time.Until(listed)
	mu.Unlock()
	if early > 0 {
		t.Fatalf("serving %v before kubelet listed the replica's pod", early)
	}
}

// runServer runs the Server of a one-GPU plugin in dir, with a short
// drain, until the test ends; tune adjusts it before it starts.
func runServer(t *testing.T, dir string, state StateWriter, tune func(*PluginServer)) *PluginServer {
	t.Helper()
	p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 2, ResolveWait: time.Second},
		[]AdvertisedGPU{{UUID: "GPU-a", MemoryMiB: 1000}}, newFakePods(), newFakePhases(nil, 0), nil, clock.RealClock{}, quietLog())
	s := NewServer(p, dir, "vgpud.sock", state, clock.RealClock{}, quietLog())
	s.quiet = 50 * time.Millisecond
	tune(s)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = s.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return s
}

// stateRecorder is a StateWriter that records the states on a channel.
type stateRecorder chan string

func (r stateRecorder) SetPluginState(_ context.Context, state string) error {
	r <- state
	return nil
}

func recv[T any](t *testing.T, c chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("nothing within 5s")
		var zero T
		return zero
	}
}

func startKubelet(t *testing.T, dir string, lists chan []*pluginapi.Device) *fakekubelet.Kubelet {
	t.Helper()
	k, err := fakekubelet.Start(dir, lists)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// A new process waits while its predecessor (the DaemonSet pod being
// replaced) still serves the socket, and takes over once it stops.
func TestServeWaitsForThePredecessor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vgpud.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := old.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	fc := clocktesting.NewFakeClock(time.Now())
	s := NewServer(nil, filepath.Dir(path), "vgpud.sock", nil, fc, quietLog())
	done := make(chan struct{})
	go func() { s.awaitPredecessor(path); close(done) }()
	// Each wait between dials is one timer on the fake clock: it found the
	// predecessor serving every time.
	waiting := func(context.Context) (bool, error) { return fc.HasWaiters(), nil }
	for dial := range 4 {
		if dial > 0 {
			fc.Step(200 * time.Millisecond)
		}
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, waiting); err != nil {
			t.Fatalf("no wait after dial %d", dial+1)
		}
	}
	select {
	case <-done:
		t.Fatal("took over while the predecessor still served")
	default:
	}
	_ = old.Close()
	fc.Step(200 * time.Millisecond) // the next dial fails: it stopped
	// and kubelet is given time to see its stream end.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, waiting); err != nil {
		t.Fatal("no wait for kubelet to see the old stream end")
	}
	select {
	case <-done:
		t.Fatal("registered before kubelet could see the old stream end")
	default:
	}
	fc.Step(500 * time.Millisecond)
	select {
	case <-done:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("still waiting after the predecessor stopped")
	}
}
