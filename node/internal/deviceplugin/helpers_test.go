package deviceplugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// fakePods is an informer's store that tests edit.
type fakePods struct {
	mu      sync.Mutex
	pods    map[types.UID]*corev1.Pod
	changed chan struct{}
	// apiOnly are pods the API shows that the informer does not yet.
	apiOnly []*corev1.Pod
	freshes int // Fresh calls
}

func newFakePods(pods ...*corev1.Pod) *fakePods {
	f := &fakePods{pods: map[types.UID]*corev1.Pod{}, changed: make(chan struct{})}
	for _, p := range pods {
		f.pods[p.UID] = p
	}
	return f
}

func (f *fakePods) List() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(f.pods))
	for _, p := range f.pods {
		out = append(out, p)
	}
	return out
}

func (f *fakePods) Fresh(context.Context) ([]*corev1.Pod, error) {
	pods := f.List()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.freshes++
	return append(pods, f.apiOnly...), nil
}

func (f *fakePods) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// put adds or replaces a pod, as an informer event would.
func (f *fakePods) put(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.UID] = p
	close(f.changed)
	f.changed = make(chan struct{})
}

// setPhase copies p with a new phase annotation into the store.
func (f *fakePods) setPhase(uid types.UID, phase protocol.Phase) {
	f.mu.Lock()
	old := f.pods[uid]
	f.mu.Unlock()
	if old == nil {
		return
	}
	p := old.DeepCopy()
	p.Annotations[wellknown.AnnotationPhase] = string(phase)
	f.put(p)
}

// fakePhases records SetPhase calls and, after lag, shows them in pods as
// the informer would.
type fakePhases struct {
	mu   sync.Mutex
	got  map[string][]protocol.Phase // ns/name -> phases written
	pods *fakePods
	lag  time.Duration
}

func newFakePhases(pods *fakePods, lag time.Duration) *fakePhases {
	return &fakePhases{got: map[string][]protocol.Phase{}, pods: pods, lag: lag}
}

func (f *fakePhases) SetPhase(_ context.Context, pod *corev1.Pod, phase protocol.Phase) error {
	f.mu.Lock()
	f.got[pod.Namespace+"/"+pod.Name] = append(f.got[pod.Namespace+"/"+pod.Name], phase)
	f.mu.Unlock()
	if f.pods != nil {
		uid := pod.UID
		time.AfterFunc(f.lag, func() { f.pods.setPhase(uid, phase) })
	}
	return nil
}

func (f *fakePhases) phases(key string) []protocol.Phase {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.Phase(nil), f.got[key]...)
}

// boundPod is a pod the leader bound to node with one GPU container per
// entry of gpus (container i gets the UUIDs in gpus[i], mem[i] MiB each).
func boundPod(name, node string, initGPUs [][]string, gpus [][]string, mem []int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	a := protocol.Assignment{Version: protocol.Version, Node: node}
	k := 0
	add := func(list *[]corev1.Container, prefix string, sets [][]string) {
		for i, set := range sets {
			name := fmt.Sprintf("%s%d", prefix, i)
			c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"nvidia.com/gpu":    *resource.NewQuantity(int64(len(set)), resource.DecimalSI),
				"nvidia.com/gpumem": *resource.NewQuantity(mem[k], resource.DecimalSI),
			}}}
			*list = append(*list, c)
			ca := protocol.ContainerAssignment{Name: name}
			for _, u := range set {
				ca.GPUs = append(ca.GPUs, protocol.GPUSlice{UUID: u, MemoryMiB: mem[k], Cores: 10 * (k + 1)})
			}
			a.Containers = append(a.Containers, ca)
			k++
		}
	}
	add(&p.Spec.InitContainers, "init", initGPUs)
	add(&p.Spec.Containers, "app", gpus)
	// A container without GPUs, which kubelet never asks about.
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar"})
	raw, err := protocol.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	p.Annotations[wellknown.AnnotationAssignment] = raw
	p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseBound)
	return p
}

func testGPUs(n int) []AdvertisedGPU {
	out := make([]AdvertisedGPU, n)
	for i := range out {
		out[i] = AdvertisedGPU{UUID: fmt.Sprintf("GPU-%04d-aaaa", i), NUMA: i * 2 / n, MemoryMiB: 81920}
	}
	return out
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// lockedBuffer collects a log written from several goroutines.
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

func testPlugin(t testing.TB, pods PodSource, phases Phases) *Plugin {
	t.Helper()
	return New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: 200 * time.Millisecond}, testGPUs(8), pods, phases, nil, clock.RealClock{}, quietLog())
}

// ids returns kubelet-style device IDs: slice 0 of each GPU.
func ids(uuids ...string) []string {
	out := make([]string, len(uuids))
	for i, u := range uuids {
		out[i] = deviceID(u, 0)
	}
	return out
}

func resourceQty(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
