package deviceplugin

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/kubeletapi/fakekubelet"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Each MIG profile on the node is its own resource, registered with
// kubelet on its own socket; its instances are healthy while their GPU
// is, Allocate is bookkeeping, and a kubelet restart registers it again.
func TestProfileServersAgainstFakeKubelet(t *testing.T) {
	dir := t.TempDir()
	lists := make(chan []*pluginapi.Device, 64)
	kubelet := startKubelet(t, dir, lists)
	gpus := []AdvertisedGPU{
		{UUID: "GPU-shared", MemoryMiB: 15360},
		{UUID: "MIG-a", Parent: "GPU-p", Profile: "1g.5gb", MemoryMiB: 4864},
		{UUID: "MIG-b", Parent: "GPU-p", Profile: "1g.5gb", MemoryMiB: 4864},
		{UUID: "MIG-c", Parent: "GPU-p", Profile: "3g.20gb", MemoryMiB: 19968},
		{UUID: "MIG-d", Parent: "GPU-p", Profile: "1g.5gb+me", MemoryMiB: 4864}, // names no resource
	}
	main := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: time.Second, RuntimeNamesPods: true}, gpus, newFakePods(), newFakePhases(nil, 0), nil, clock.RealClock{}, quietLog())
	s := NewProfileServers(main, gpus, wellknown.DefaultResourceNames(), dir, "vgpud.sock", clock.RealClock{}, quietLog())
	s.retry = 50 * time.Millisecond
	if got := s.Resources(); !slices.Equal(got, []string{"nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"}) {
		t.Fatalf("resources %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = s.Run(ctx); close(stopped) }()

	registered := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for range 2 {
			r := recv(t, kubelet.Registrations)
			if r.Options.GetGetPreferredAllocationAvailable() {
				t.Errorf("%s asks for preferred allocations", r.ResourceName)
			}
			out[r.ResourceName] = r.Endpoint
		}
		return out
	}
	want := map[string]string{"nvidia.com/mig-1g.5gb": "vgpud-mig-1g.5gb.sock", "nvidia.com/mig-3g.20gb": "vgpud-mig-3g.20gb.sock"}
	if got := registered(); !maps.Equal(got, want) {
		t.Fatalf("registrations %v, want %v", got, want)
	}
	byCount := map[int][]*pluginapi.Device{}
	for range 2 {
		l := recv(t, lists)
		byCount[len(l)] = l
	}
	if l := byCount[2]; len(l) != 2 || l[0].ID != "MIG-a" || l[1].ID != "MIG-b" || l[0].Health != pluginapi.Healthy {
		t.Fatalf("the 1g.5gb list: %v", byCount)
	}
	if l := byCount[1]; len(l) != 1 || l[0].ID != "MIG-c" || l[0].Health != pluginapi.Healthy {
		t.Fatalf("the 3g.20gb list: %v", byCount)
	}

	// kubelet drops the plugins' streams while it keeps serving: they
	// register again on their own.
	kubelet.DropStreams()
	if got := registered(); !maps.Equal(got, want) {
		t.Fatalf("after kubelet dropped them: %v", got)
	}
	for range 2 {
		recv(t, lists)
	}

	// The parent GPU unhealthy: every instance of it, each resource.
	main.SetUnhealthy(map[string]bool{"GPU-p": true})
	for range 2 {
		for _, d := range recv(t, lists) {
			if d.Health != pluginapi.Unhealthy {
				t.Errorf("instance %s %s with its GPU unhealthy", d.ID, d.Health)
			}
		}
	}

	// Allocate answers kubelet's bookkeeping only.
	r, err := kubelet.Allocate(ctx, []string{"MIG-c"})
	if err != nil || len(r.Envs) != 0 || len(r.Devices) != 0 || len(r.Mounts) != 0 {
		t.Fatalf("Allocate: %+v, %v", r, err)
	}

	// kubelet restarts: both are served and registered again.
	kubelet.Stop()
	k2, err := fakekubelet.Start(dir, lists)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k2.Stop)
	kubelet = k2
	if got := registered(); !maps.Equal(got, want) {
		t.Fatalf("after kubelet's restart: %v", got)
	}
	cancel()
	<-stopped
	if left, _ := filepath.Glob(filepath.Join(dir, "vgpud-mig-*")); len(left) != 0 {
		t.Errorf("sockets left after Run: %v", left)
	}
}
