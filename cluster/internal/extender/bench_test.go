package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// syntheticCache is 1000 nodes × 8 GPUs (80 GB, split 10) with 20000 pods
// placed round-robin (1 GPU, 4000 MiB, 10 cores each), built through the
// same annotations a real leader reads.
func syntheticCache(b *testing.B, nodes, pods int) (*books.Ledger, []string) {
	b.Helper()
	c := books.New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		inv := protocol.Inventory{}
		for g := 0; g < 8; g++ {
			inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: fmt.Sprintf("GPU-%05d-%d", i, g), Index: g, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Cores: 100, Split: 10, NUMA: g / 4, Healthy: true})
		}
		raw, err := protocol.EncodeInventory(inv)
		if err != nil {
			b.Fatal(err)
		}
		c.SetNode(&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Annotations: map[string]string{wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing}},
			Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("80")}},
		})
	}
	for k := 0; k < pods; k++ {
		n := k % nodes
		a := protocol.Assignment{Version: protocol.Version, Node: names[n], Containers: []protocol.ContainerAssignment{{Name: "c",
			GPUs: []protocol.GPUSlice{{UUID: fmt.Sprintf("GPU-%05d-%d", n, (k/nodes)%8), MemoryMiB: 4000, Cores: 10}}}}}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", k), Namespace: "bench", UID: types.UID(fmt.Sprintf("uid-%d", k))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		c.Book(recordOf(p), a, "", 0)
	}
	return c, names
}

// BenchmarkFilterHTTP drives /filter the way kube-scheduler does
// (node-cache-capable NodeNames, all nodes) for a pod asking 1 GPU,
// 10000 MiB and 20 cores, and reports p50/p99 of whole handler calls:
// JSON decode, fit over every node, JSON encode. caches=cold evicts the
// CPU's caches before each call, as the leader's other work (watch
// events, TLS, the collector) does between two filters: its walk over
// every node's books then reads them from memory.
func BenchmarkFilterHTTP(b *testing.B) {
	for _, v := range []struct {
		pods int
		cold bool
	}{{0, false}, {20000, false}, {20000, true}} {
		name := fmt.Sprintf("nodes=1000/pods=%d", v.pods)
		if v.cold {
			name += "/caches=cold"
		}
		b.Run(name, func(b *testing.B) { filterHTTP(b, v.pods, v.cold) })
	}
}

// evictBytes is assumed larger than the last-level cache a core of
// these machines shares (32 MiB on most EPYC CCXs; /proc/cpuinfo here
// names no model). Written, not read: the leader's other work leaves
// dirty lines too.
const evictBytes = 64 << 20

func filterHTTP(b *testing.B, pods int, cold bool) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, names := syntheticCache(b, 1000, pods)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	h := NewPlacer(c, nil, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := `{"metadata":{"name":"train","namespace":"ai"},"spec":{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000","nvidia.com/gpucores":"20"}}}]}}`
	nn, _ := json.Marshal(names)
	body := `{"Pod":` + pod + `,"NodeNames":` + string(nn) + `}`
	var evict []byte
	if cold {
		evict = make([]byte, evictBytes)
	}
	lat := make([]time.Duration, 0, 4096)
	filter := FilterHandler(h) // once, as the leader mounts it
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if evict != nil {
			b.StopTimer() // ns/op is the filter's, as in the hot rows
			for i := 0; i < len(evict); i += 64 {
				evict[i]++
			}
			b.StartTimer()
		}
		w := httptest.NewRecorder()
		start := time.Now()
		filter(w, httptest.NewRequest(http.MethodPost, "/filter", strings.NewReader(body)))
		lat = append(lat, time.Since(start))
		if w.Code != 200 {
			b.Fatal(w.Body.String())
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "cache-heap-MiB")
}

// BenchmarkBindDistinctNodes binds pods one after another, each to a node
// no other pod is in flight on, through the handler and client-go's fake
// clientset (no apiserver round trips: this is vgpud's own cost).
func BenchmarkBindDistinctNodes(b *testing.B) {
	c, names := syntheticCache(b, 1000, 0)
	kube := fake.NewClientset()
	binder := NewBinder(context.Background(), BindConfig{Names: wellknown.DefaultResourceNames(), Scheduler: "vgpud-scheduler", Policy: NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), Wait: time.Second, UnansweredHold: time.Minute},
		BinderDeps{API: kube.CoreV1(), Books: c, Clock: clock.RealClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	limits := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("10000"), "nvidia.com/gpucores": resource.MustParse("20")}
	// The fake clientset's Binding leaves the pod as it was, so 1000 pods
	// serve any b.N, each bound again once its node is free.
	pods := make([]string, 1000)
	for i := range pods {
		pods[i] = fmt.Sprintf("b%d", i)
		_, err := kube.CoreV1().Pods("bench").Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pods[i], Namespace: "bench", UID: types.UID("uid-" + pods[i])},
			Spec:       corev1.PodSpec{SchedulerName: "vgpud-scheduler", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: limits}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pod := pods[i%len(pods)]
		body := fmt.Sprintf(`{"PodName":%q,"PodNamespace":"bench","PodUID":"uid-%s","Node":%q}`, pod, pod, names[i%len(names)])
		w := httptest.NewRecorder()
		BindHandler(binder)(w, httptest.NewRequest(http.MethodPost, "/bind", strings.NewReader(body)))
		if !strings.Contains(w.Body.String(), `"Error":""`) {
			b.Fatal(w.Body.String())
		}
		// Nothing here plays kubelet: free the node for the bind that
		// comes back to it after 1000 more (a map delete and the node's
		// recount, timed with the bind).
		c.DeletePod(types.UID("uid-" + pod))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "binds/s")
}
