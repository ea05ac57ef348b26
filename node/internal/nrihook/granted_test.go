package nrihook

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/vgpud/vgpud/protocol"
)

type grants struct {
	mu      sync.Mutex
	byID    map[string]protocol.ContainerAssignment
	removed []string
	told    chan struct{}
}

func newGrants() *grants {
	return &grants{byID: map[string]protocol.ContainerAssignment{}, told: make(chan struct{}, 16)}
}

func (g *grants) Granted(id string, _ Container, a protocol.ContainerAssignment) {
	g.mu.Lock()
	g.byID[id] = a
	g.mu.Unlock()
	g.told <- struct{}{}
}

func (g *grants) Removed(uid string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removed = append(g.removed, uid)
}

func (g *grants) Retain(ids map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.byID {
		if !ids[id] {
			delete(g.byID, id)
		}
	}
}

func (g *grants) get(id string) (protocol.ContainerAssignment, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := g.byID[id]
	return a, ok
}

// The hook tells of each grant by the runtime's container ID, with the
// assignment the node then holds the container's processes to; voided
// and refused containers are not told.
func TestGrantsAreToldByContainerID(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, _ := testHook(victim)
	g := newGrants()
	h.Tell(g)
	if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), &api.Container{Id: "c1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.CreateContainer(context.Background(), sandbox(victim), &api.Container{Id: "c2", Name: "sidecar"}); err != nil {
		t.Fatal(err)
	}
	a, ok := g.get("c1")
	if !ok || len(a.GPUs) != 1 || a.GPUs[0].UUID != "GPU-0" || a.GPUs[0].MemoryMiB != 1000 {
		t.Errorf("c1 told %+v %v; want its GPU-0 slice of 1000 MiB", a, ok)
	}
	if _, ok := g.get("c2"); ok {
		t.Error("a voided container was told as granted")
	}
	if err := h.RemovePodSandbox(context.Background(), sandbox(victim)); err != nil {
		t.Fatal(err)
	}
	if len(g.removed) != 1 || g.removed[0] != string(victim.UID) {
		t.Errorf("removed %v", g.removed)
	}
}

// A hook that connects to a runtime already running granted containers
// (vgpud restarted) tells of them too.
func TestSynchronizeTellsOfRunningGrants(t *testing.T) {
	victim := gpuPod("victim", "GPU-0")
	h, _ := testHook(victim)
	g := newGrants()
	h.Tell(g)
	g.byID["gone"] = protocol.ContainerAssignment{} // removed while the hook was away
	sb := sandbox(victim)
	sb.Id = "sb1"
	ctrs := []*api.Container{
		{Id: "c1", PodSandboxId: "sb1", Name: "app", State: api.ContainerState_CONTAINER_RUNNING},
		{Id: "c0", PodSandboxId: "sb1", Name: "app", State: api.ContainerState_CONTAINER_STOPPED},
	}
	if _, err := h.Synchronize(context.Background(), []*api.PodSandbox{sb}, ctrs); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.told:
	case <-time.After(10 * time.Second):
		t.Fatal("the running container was never told")
	}
	if _, ok := g.get("c1"); !ok {
		t.Error("running c1 not told")
	}
	if _, ok := g.get("c0"); ok {
		t.Error("stopped c0 told")
	}
	if _, ok := g.get("gone"); ok {
		t.Error("a container the runtime no longer runs is still registered")
	}
}
