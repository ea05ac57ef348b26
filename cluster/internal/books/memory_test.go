package books

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// BenchmarkBooksMemory is what the leader keeps per node and per placed
// pod, as it keeps them: each object goes through the informers'
// transform into a store indexed by namespace (as watches.New builds
// them) and then into the books, as Watch does. Nodes have 8 GPUs; pods
// one container of 1 GPU, 4000 MiB and 10 cores with vgpud's assignment,
// their strings allocated one by one as a decoded watch event's are. It
// reports the Go heap kept, after a full collection, per node and per
// pod (B/node, B/pod): make bench's row for issue #54's item 3.
func BenchmarkBooksMemory(b *testing.B) {
	const nodes, pods = 1000, 20000
	names := wellknown.DefaultResourceNames()
	for range b.N {
		transform := Transform(names)
		index := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
		nodeStore := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, index)
		podStore := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, index)
		c := New(names, "vgpud-scheduler", clock.RealClock{})
		start := heapKept()
		for i := range nodes {
			o, err := transform(memoryNode(b, i))
			if err != nil {
				b.Fatal(err)
			}
			if err := nodeStore.Add(o); err != nil {
				b.Fatal(err)
			}
			c.SetNode(o.(*corev1.Node))
		}
		withNodes := heapKept()
		for k := range pods {
			o, err := transform(memoryPod(b, k, nodes))
			if err != nil {
				b.Fatal(err)
			}
			if err := podStore.Add(o); err != nil {
				b.Fatal(err)
			}
			if err := c.SetPod(o.(*slimpod.Pod)); err != nil {
				b.Fatal(err)
			}
		}
		withPods := heapKept()
		if got := c.PodCount(); got != pods {
			b.Fatalf("the books hold %d pods, want %d", got, pods)
		}
		b.ReportMetric(float64(withNodes-start)/nodes, "B/node")
		b.ReportMetric(float64(withPods-withNodes)/pods, "B/pod")
		runtime.KeepAlive(nodeStore)
		runtime.KeepAlive(podStore)
		runtime.KeepAlive(c)
	}
}

// heapKept is the Go heap in use after a full collection.
func heapKept() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// clone gives s storage of its own, as decoding an object does.
func clone(s string) string { return strings.Clone(s) }

func memoryNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// memoryUUID is a GPU UUID as NVML gives it: 40 bytes.
func memoryUUID(node, gpu int) string {
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", node, gpu)
}

func memoryNode(b testing.TB, i int) *corev1.Node {
	inv := protocol.Inventory{}
	for g := range 8 {
		inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: memoryUUID(i, g), Index: g, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Cores: 100, Split: 10, NUMA: g / 4, Healthy: true})
	}
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		b.Fatal(err)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: memoryNodeName(i), UID: types.UID(fmt.Sprintf("%08d-0000-0000-0000-000000000000", i)), ResourceVersion: fmt.Sprint(1000 + i),
			Labels: map[string]string{clone("kubernetes.io/hostname"): memoryNodeName(i), clone("kubernetes.io/os"): clone("linux"), clone("kubernetes.io/arch"): clone("amd64")},
			Annotations: map[string]string{clone(wellknown.AnnotationGPUs): raw, clone(wellknown.AnnotationPlugin): clone(wellknown.PluginServing),
				clone("node.alpha.kubernetes.io/ttl"): clone("0"), clone("volumes.kubernetes.io/controller-managed-attach-detach"): clone("true")}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("80"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Capacity:    corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("80"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
}

func memoryPod(b testing.TB, k, nodes int) *corev1.Pod {
	n := k % nodes
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: memoryNodeName(n), Containers: []protocol.ContainerAssignment{{Name: "main",
		GPUs: []protocol.GPUSlice{{UUID: memoryUUID(n, (k/nodes)%8), MemoryMiB: 4000, Cores: 10}}}}})
	if err != nil {
		b.Fatal(err)
	}
	limits := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("4000"), "nvidia.com/gpucores": resource.MustParse("10")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("train-%05d", k), Namespace: clone("team-a"), UID: types.UID(fmt.Sprintf("%08d-1111-2222-3333-444444444444", k)), ResourceVersion: fmt.Sprint(50000 + k),
			Labels:      map[string]string{clone("app"): clone("train")},
			Annotations: map[string]string{clone(wellknown.AnnotationAssignment): raw, clone(wellknown.AnnotationPhase): clone(string(protocol.PhaseAllocated))}},
		Spec: corev1.PodSpec{NodeName: memoryNodeName(n), SchedulerName: clone("vgpud-scheduler"),
			Containers: []corev1.Container{{Name: clone("main"), Image: clone("registry.example/train:1"), Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// A booking names its GPU by the node's own UUID string, and keeps
// sharing it when the node's inventory is decoded again.
func TestBookingsShareTheNodesUUIDs(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	transform := Transform(names)
	c := New(names, "vgpud-scheduler", clock.RealClock{})
	setNode := func() {
		o, err := transform(memoryNode(t, 0))
		if err != nil {
			t.Fatal(err)
		}
		c.SetNode(o.(*corev1.Node))
	}
	setNode()
	o, err := transform(memoryPod(t, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	p := o.(*slimpod.Pod)
	if err := c.SetPod(p); err != nil {
		t.Fatal(err)
	}
	setNode()
	c.mu.RLock()
	defer c.mu.RUnlock()
	slice := c.pods[p.UID].placement[0].GPUs[0]
	for _, g := range c.nodes[memoryNodeName(0)].gpus {
		if g.UUID == slice.UUID {
			if unsafe.StringData(g.UUID) != unsafe.StringData(slice.UUID) {
				t.Errorf("the booking's UUID %s is a copy of the node's", slice.UUID)
			}
			return
		}
	}
	t.Fatalf("no GPU of the node is %s", slice.UUID)
}
