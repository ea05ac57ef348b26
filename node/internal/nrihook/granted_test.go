package nrihook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/containerd/nri/pkg/api"
	testingclock "k8s.io/utils/clock/testing"

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

func (g *grants) Granted(id string, _ NamedContainer, a protocol.ContainerAssignment) {
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
	// A stale sandbox of the pod stopped or removed (kubelet made the pod
	// a new one) forgets nothing.
	old := sandbox(victim)
	old.Id = "old-sandbox"
	if err := h.StopPodSandbox(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	if err := h.RemovePodSandbox(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	if len(g.removed) != 0 {
		t.Errorf("removed %v for a sandbox the pod no longer runs in", g.removed)
	}
	// Forgotten once its sandbox stops, not when the runtime gets round
	// to removing it.
	if err := h.StopPodSandbox(context.Background(), sandbox(victim)); err != nil {
		t.Fatal(err)
	}
	if len(g.removed) != 1 || g.removed[0] != string(victim.UID) {
		t.Errorf("removed %v once stopped", g.removed)
	}
	if err := h.RemovePodSandbox(context.Background(), sandbox(victim)); err != nil {
		t.Fatal(err)
	}
	if len(g.removed) != 2 || g.removed[1] != string(victim.UID) {
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

// A container the runtime created while the hook was killed mid-call runs
// without the hook's devices; the hook, reconnected, ends it so that it
// restarts through the hook. Containers whose env is the hook's, or that
// the runtime gave no env for, are left alone.
func TestSynchronizeEndsContainersThatEscapedTheHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		victim := gpuPod("victim", "GPU-0")
		h, _ := testHook(victim)
		g := newGrants()
		h.Tell(g)
		evicted := map[string]int{}
		var mu sync.Mutex
		h.EvictWith(func(id string, pid int) error {
			mu.Lock()
			defer mu.Unlock()
			evicted[id] = pid
			return nil
		})
		sb := sandbox(victim)
		sb.Id = "sb1"
		running := api.ContainerState_CONTAINER_RUNNING
		ctrs := []*api.Container{
			{Id: "bare", PodSandboxId: "sb1", Name: "app", State: running, Pid: 11, Env: []string{"PATH=/bin"}},
			{Id: "held", PodSandboxId: "sb1", Name: "app", State: running, Pid: 12, Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-0"}},
			{Id: "wide", PodSandboxId: "sb1", Name: "sidecar", State: running, Pid: 13, Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
			{Id: "cpu", PodSandboxId: "sb1", Name: "sidecar", State: running, Pid: 14, Env: []string{"PATH=/bin"}},
			{Id: "unsaid", PodSandboxId: "sb1", Name: "app", State: running, Pid: 15},
		}
		if _, err := h.Synchronize(context.Background(), []*api.PodSandbox{sb}, ctrs); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"bare": 11, "wide": 13}
		synctest.Wait() // the resync has judged every container
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(evicted) != fmt.Sprint(want) {
			t.Errorf("evicted %v; want %v", evicted, want)
		}
		if _, ok := g.get("held"); !ok {
			t.Error("the container holding its grant was not told")
		}
		if _, ok := g.get("bare"); ok {
			t.Error("an escaped container was told as granted")
		}
	})
}

// At a reconnection the hook judges no container of its own pod (vgpud's
// own sets NVIDIA_VISIBLE_DEVICES=all, and ending it would end the hook),
// and judges a GPU agent's only once the namespaces labelled for agents
// are in: before that an escaped container would count as refused and be
// left running.
func TestSynchronizeWaitsForTheAgentsAndSparesItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		self := gpuPod("vgpud-x", "")
		self.Namespace = "vgpud-system"
		tenant := gpuPod("tenant", "")
		tenant.Spec.ServiceAccountName = "dcgm" // an agent's name, in no agents' namespace
		h, _ := testHook(self, tenant)
		fake := testingclock.NewFakeClock(time.Now())
		h.clock = fake
		synced := false
		var mu sync.Mutex
		h.rules.Self = "vgpud-system/vgpud-x"
		h.rules.AgentsSynced = func() bool { mu.Lock(); defer mu.Unlock(); return synced }
		h.rules.Agent = func(ns, account string) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if !synced {
				return false, errors.New("not in yet")
			}
			return false, nil
		}
		h.Tell(newGrants())
		evicted := map[string]bool{}
		h.EvictWith(func(id string, _ int) error { mu.Lock(); defer mu.Unlock(); evicted[id] = true; return nil })
		sbSelf, sbTenant := sandbox(self), sandbox(tenant)
		sbSelf.Id, sbTenant.Id = "sb-self", "sb-tenant"
		running := api.ContainerState_CONTAINER_RUNNING
		ctrs := []*api.Container{
			{Id: "self", PodSandboxId: "sb-self", Name: "sidecar", State: running, Pid: 21, Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
			{Id: "wide", PodSandboxId: "sb-tenant", Name: "sidecar", State: running, Pid: 22, Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
		}
		if _, err := h.Synchronize(context.Background(), []*api.PodSandbox{sbSelf, sbTenant}, ctrs); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		fake.Step(time.Second) // the namespaces' list still not in
		synctest.Wait()
		mu.Lock()
		if len(evicted) != 0 {
			t.Errorf("judged before the agents' namespaces were in: evicted %v", evicted)
		}
		synced = true
		mu.Unlock()
		fake.Step(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !evicted["wide"] || evicted["self"] {
			t.Errorf("evicted %v; want the tenant's escaped container, never the hook's own", evicted)
		}
	})
}
