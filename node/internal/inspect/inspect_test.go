package inspect

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func pod(name, node string, phase protocol.Phase, slices ...protocol.GPUSlice) *corev1.Pod {
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: node, Containers: []protocol.ContainerAssignment{{Name: "c", GPUs: slices}}})
	if err != nil {
		panic(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{wellknown.AnnotationAssignment: raw, wellknown.AnnotationPhase: string(phase)}}}
}

func TestUsageAndRender(t *testing.T) {
	inv := protocol.Inventory{Version: 1, GPUs: []protocol.GPU{
		{UUID: "GPU-aaaaaaaa-1111", Index: 0, Model: "A100", MemoryMiB: 40000, Cores: 100, Split: 10, Healthy: true},
		{UUID: "GPU-bbbbbbbb-2222", Index: 1, Model: "A100", MemoryMiB: 40000, Cores: 100, Split: 10, Healthy: false},
	}}
	done := pod("done", "n1", protocol.PhaseAllocated, protocol.GPUSlice{UUID: "GPU-aaaaaaaa-1111", MemoryMiB: 9999, Cores: 1})
	done.Status.Phase = corev1.PodSucceeded
	pods := []*corev1.Pod{
		pod("a", "n1", protocol.PhaseAllocated, protocol.GPUSlice{UUID: "GPU-aaaaaaaa-1111", MemoryMiB: 10000, Cores: 20}),
		pod("b", "n1", protocol.PhaseBound, protocol.GPUSlice{UUID: "GPU-aaaaaaaa-1111", MemoryMiB: 5000, Cores: 0}, protocol.GPUSlice{UUID: "GPU-bbbbbbbb-2222", MemoryMiB: 5000}),
		pod("c", "n1", protocol.Failed("no"), protocol.GPUSlice{UUID: "GPU-bbbbbbbb-2222", MemoryMiB: 7000}),
		pod("other", "n2", protocol.PhaseAllocated, protocol.GPUSlice{UUID: "GPU-aaaaaaaa-1111", MemoryMiB: 7000}),
		done,
	}
	gpus, allocs := Usage("n1", inv, pods, nil)
	if g := gpus[0]; g.MemoryUsedMiB != 15000 || g.CoresUsed != 20 || g.SlicesUsed != 2 {
		t.Errorf("GPU 0 %+v", g)
	}
	// Like the leader's books, a pod whose Allocate failed holds its slice
	// until kubelet terminates it; only the terminated pod holds nothing.
	if g := gpus[1]; g.MemoryUsedMiB != 12000 || g.SlicesUsed != 2 || g.Healthy {
		t.Errorf("GPU 1 %+v", g)
	}
	if len(allocs) != 4 {
		t.Fatalf("allocations %+v", allocs)
	}
	var out bytes.Buffer
	taken := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := inspectv1.NodeSnapshot{Node: "n1", Ready: true, Role: "node+cluster", Leader: "vgpud-x", IsLeader: true, GPUs: gpus, Allocations: allocs, Taken: taken,
		Registration: inspectv1.KubeletRegistration{Count: 2, Last: taken.Add(-90 * time.Second), LatencyMs: 1.5, Trigger: "kubelet.sock created"}}
	if err := Render(&out, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vgpud-x (this replica)", "registered 2 time(s), last 1m30s ago", "GPU-aaaaaaaa", "15000/40000", "2/10", "UNHEALTHY", "ns/a", "failed: no"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// inspect and the leader count a pod the same way: one footprint rule.
func TestUsageCountsInitAndSidecarLikeTheBooks(t *testing.T) {
	inv := protocol.Inventory{Version: 1, GPUs: []protocol.GPU{{UUID: "GPU-a", Index: 0, Model: "A100", MemoryMiB: 40000, Cores: 100, Split: 10, Healthy: true}}}
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{
		{Name: "setup", GPUs: []protocol.GPUSlice{{UUID: "GPU-a", MemoryMiB: 30000}}},
		{Name: "proxy", GPUs: []protocol.GPUSlice{{UUID: "GPU-a", MemoryMiB: 4000, Cores: 10}}},
		{Name: "main", GPUs: []protocol.GPUSlice{{UUID: "GPU-a", MemoryMiB: 20000, Cores: 30}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: map[string]string{wellknown.AnnotationAssignment: raw}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "main"}},
		},
	}
	gpus, _ := Usage("n1", inv, []*corev1.Pod{p}, nil)
	// max(setup 30000, proxy 4000 + main 20000) = 30000 MiB; cores 10 + 30; two slots for life.
	if g := gpus[0]; g.MemoryUsedMiB != 30000 || g.CoresUsed != 40 || g.SlicesUsed != 2 {
		t.Errorf("GPU %+v", g)
	}
	// Each pod has its own peak; two pods add up.
	q := p.DeepCopy()
	q.Name = "q"
	gpus, _ = Usage("n1", inv, []*corev1.Pod{p, q}, nil)
	if g := gpus[0]; g.MemoryUsedMiB != 60000 || g.CoresUsed != 80 || g.SlicesUsed != 4 {
		t.Errorf("two pods: GPU %+v", g)
	}
}

func TestServeFetchAndNoDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inspect.sock")
	if _, err := Fetch(context.Background(), path); err == nil || !strings.Contains(err.Error(), "no vgpud daemon") {
		t.Fatalf("Fetch without a daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &fakeMock{injected: make(chan string, 1), declared: make(chan string, 1), plugged: make(chan string, 1)}
	go Serve(ctx, path, func() inspectv1.NodeSnapshot { return inspectv1.NodeSnapshot{Node: "n1"} }, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Serve listens a moment after it starts.
	var s inspectv1.NodeSnapshot
	var err error
	if werr := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		s, err = Fetch(ctx, path)
		return err == nil, nil
	}); werr != nil || s.Node != "n1" {
		t.Fatalf("Fetch = %+v, %v", s, err)
	}
	if err := InjectXID(ctx, path, "3", 79); err != nil {
		t.Fatalf("InjectXID: %v", err)
	}
	if got := <-m.injected; got != "3" {
		t.Fatalf("injected into GPU %q, want 3", got)
	}
	if err := SetProcess(ctx, path, "1", 4242, 2048, 30); err != nil {
		t.Fatalf("SetProcess: %v", err)
	}
	if got := <-m.declared; got != "1:4242:2048:30" {
		t.Fatalf("declared %q", got)
	}
	if err := SetPlugged(ctx, path, "2", false); err != nil {
		t.Fatalf("SetPlugged: %v", err)
	}
	if got := <-m.plugged; got != "2:false" {
		t.Fatalf("plugged %q", got)
	}
}

type fakeMock struct{ injected, declared, plugged chan string }

func (f *fakeMock) SetPlugged(gpu string, plugged bool) error {
	f.plugged <- fmt.Sprintf("%s:%v", gpu, plugged)
	return nil
}

func (f *fakeMock) InjectXIDByName(gpu string, _ uint64) error { f.injected <- gpu; return nil }
func (f *fakeMock) SetProcess(gpu string, pid int, used uint64, sm int) error {
	f.declared <- fmt.Sprintf("%s:%d:%d:%d", gpu, pid, used, sm)
	return nil
}

func TestRenderShowsUse(t *testing.T) {
	var b strings.Builder
	s := inspectv1.NodeSnapshot{Node: "n1", Use: &inspectv1.GPUUse{Mode: "enforce", Taken: time.Unix(100, 0),
		Containers: []inspectv1.ContainerUse{
			{Namespace: "t", Pod: "greedy", Container: "main", GPU: "GPU-0123456789", UsedMiB: 2400, SliceMiB: 1000, Over: true, SMPercent: 55, Cores: 30, Processes: 2, Kills: 1},
			{Namespace: "t", Pod: "big", Container: "main", GPU: "GPU-0123456789", UsedMiB: 30000, SliceMiB: 40960, Whole: true, SMPercent: -1},
		},
		Unattributed: []inspectv1.ProcessUse{{GPU: "GPU-0123456789", PID: 4242, UsedMiB: 512}}}}
	if err := Render(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"GPU usage (enforce)", "t/greedy", "1000 OVER", "40960 (whole GPU)", "PID 4242", "reported, never killed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A node that serves DRA claims says so, and lists what it prepared.
func TestRenderShowsClaims(t *testing.T) {
	var b strings.Builder
	s := inspectv1.NodeSnapshot{Node: "n1", DRA: true, Claims: []inspectv1.ClaimAllocation{
		{Namespace: "team", Claim: "shared", Pods: []string{"a", "b"}, Device: "gpu-0", GPU: "GPU-1234567890ab", MemoryMiB: 4096, Cores: 30}}}
	if err := Render(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"serves DRA claims", "CLAIM", "team/shared  a,b   gpu-0   GPU-12345678  4096  30"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}
