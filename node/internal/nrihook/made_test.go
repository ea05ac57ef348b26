package nrihook

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

type fakeMaker struct {
	mu      sync.Mutex
	made    map[string]string
	changed chan struct{}
}

func (f *fakeMaker) Made(id, pod string) (string, bool) {
	if pod != "ns/p/uid" {
		return "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.made[id]
	return u, ok
}

func (f *fakeMaker) Recorded(id, pod string) (string, bool) { return f.Made(id, pod) }

func (f *fakeMaker) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeMaker) make(id, uuid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made[id] = uuid
	close(f.changed)
	f.changed = make(chan struct{})
}

// A container granted an instance to make gets the MIG device once the
// maker has made it, waiting for it within the hook's wait; never the
// instance's name, and never a device not made.
func TestResolveMade(t *testing.T) {
	// In a bubble: the hook's wait passes once every goroutine waits.
	synctest.Test(t, func(t *testing.T) {
		id := protocol.OnDemandID("GPU-a", "1g.10gb", 3)
		grantOf := func() Decision {
			ca := protocol.ContainerAssignment{Name: "c", GPUs: []protocol.GPUSlice{{UUID: id, MemoryMiB: 9984, Cores: 13, MIG: true, Make: true}}}
			return Decision{Action: Grant, Assigned: ca, Slice: grant.For(ca, "uid", nil, grant.Shape{})}
		}
		h := New(Ruleset{Node: "n1"}, nil, 300*time.Millisecond, nil, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if d := h.resolveMade(context.Background(), grantOf(), NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"}); d.Action != Refuse || !strings.Contains(d.Reason, "makes none") {
			t.Errorf("no maker: %+v", d)
		}
		m := &fakeMaker{made: map[string]string{}, changed: make(chan struct{})}
		h.SetMaker(m)
		if d := h.resolveMade(context.Background(), grantOf(), NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"}); d.Action != Refuse || !strings.Contains(d.Reason, "has not made yet") {
			t.Errorf("never made: %+v", d)
		}
		go func() {
			synctest.Wait() // the hook waits for the make
			m.make(id, "MIG-made")
		}()
		d := h.resolveMade(context.Background(), grantOf(), NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"})
		if d.Action != Grant || d.Slice.Env[containerenv.EnvVisibleDevices] != "MIG-made" || d.Assigned.GPUs[0].UUID != "MIG-made" {
			t.Errorf("made while waiting: %+v", d)
		}
		// A shared slice passes as it is.
		plain := Decision{Action: Grant, Assigned: protocol.ContainerAssignment{GPUs: []protocol.GPUSlice{{UUID: "GPU-a", MemoryMiB: 1}}}, Slice: grant.Slice{Env: map[string]string{containerenv.EnvVisibleDevices: "GPU-a"}}}
		if d := h.resolveMade(context.Background(), plain, NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"}); d.Slice.Env[containerenv.EnvVisibleDevices] != "GPU-a" {
			t.Errorf("shared: %+v", d)
		}
	})
}

// A container found running when the hook connects again, given a made
// instance, is judged by the device the record names, not by the
// instance's name, so it is not taken for one that escaped the hook;
// without a record of it, it is left alone.
func TestRecordedForRunningContainers(t *testing.T) {
	id := protocol.OnDemandID("GPU-a", "1g.10gb", 3)
	ca := protocol.ContainerAssignment{Name: "c", GPUs: []protocol.GPUSlice{{UUID: id, MemoryMiB: 9984, Cores: 13, MIG: true, Make: true}}}
	d := Decision{Action: Grant, Assigned: ca, Slice: grant.For(ca, "uid", nil, grant.Shape{})}
	c := NamedContainer{Namespace: "ns", Pod: "p", UID: "uid", Name: "c"}
	h := New(Ruleset{Node: "n1"}, nil, time.Second, nil, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, ok := h.recorded(d, c); ok {
		t.Error("judged without a maker")
	}
	m := &fakeMaker{made: map[string]string{id: "MIG-made"}, changed: make(chan struct{})}
	h.SetMaker(m)
	got, ok := h.recorded(d, c)
	if !ok || escaped(got, &api.Container{Env: []string{containerenv.EnvVisibleDevices + "=MIG-made"}}, Ruleset{}) || !escaped(got, &api.Container{Env: []string{containerenv.EnvVisibleDevices + "=MIG-other"}}, Ruleset{}) {
		t.Errorf("recorded %+v %v: want judged by MIG-made", got, ok)
	}
	if d.Slice.Env[containerenv.EnvVisibleDevices] != id {
		t.Error("the decision's env was changed in place")
	}
}

// A container found running on a made instance when the hook connects,
// before the node has its maker, is neither ended nor forgotten: it is
// judged, and measured, once the maker comes.
func TestRunningOnMadeInstanceJudgedWhenTheMakerComes(t *testing.T) {
	id := protocol.OnDemandID("GPU-a", "1g.10gb", 3)
	p := gpuPod("ondemand", "")
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: node, Containers: []protocol.ContainerAssignment{
		{Name: "app", GPUs: []protocol.GPUSlice{{UUID: id, MemoryMiB: 9984, Cores: 13, MIG: true, Make: true}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[wellknown.AnnotationAssignment] = raw
	h, _ := testHook(p)
	g := newGrants()
	h.Tell(g)
	var mu sync.Mutex
	evicted := 0
	h.EvictWith(func(string, int) error { mu.Lock(); defer mu.Unlock(); evicted++; return nil })
	sb := sandbox(p)
	sb.Id = "sb1"
	ctrs := []*api.Container{{Id: "c1", PodSandboxId: "sb1", Name: "app", State: api.ContainerState_CONTAINER_RUNNING, Pid: 7, Env: []string{containerenv.EnvVisibleDevices + "=MIG-made"}}}
	if _, err := h.Synchronize(context.Background(), []*api.PodSandbox{sb}, ctrs); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.pending) == 1, nil
	}); err != nil {
		t.Fatal("the container is not kept for the maker")
	}
	m := &fakeMaker{made: map[string]string{id: "MIG-made"}, changed: make(chan struct{})}
	h.SetMaker(maker{m, "t/ondemand/uid-ondemand"})
	if a, ok := g.get("c1"); !ok || a.GPUs[0].UUID != "MIG-made" {
		t.Errorf("told %+v %v; want the container measured on MIG-made", a, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	if evicted != 0 {
		t.Error("a container on its made instance was ended")
	}
}

// maker answers for one pod key, as the record does.
type maker struct {
	*fakeMaker
	pod string
}

func (m maker) Recorded(id, pod string) (string, bool) {
	if pod != m.pod {
		return "", false
	}
	m.fakeMaker.mu.Lock()
	defer m.fakeMaker.mu.Unlock()
	u, ok := m.fakeMaker.made[id]
	return u, ok
}
