package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// BenchmarkAllocate1000Pods is one Allocate with 1000 pods on the node:
// 999 already allocated, one bound and waiting. It reports p50 and p99
// besides the mean.
func BenchmarkAllocate1000Pods(b *testing.B) {
	g := testGPUs(8)
	var pods []*corev1.Pod
	for i := range 999 {
		p := boundPod(fmt.Sprintf("old%04d", i), "n1", nil, [][]string{{g[i%8].UUID}}, []int64{1000})
		p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
		pods = append(pods, p)
	}
	waiting := boundPod("new", "n1", nil, [][]string{{g[2].UUID, g[5].UUID}}, []int64{4000})
	pods = append(pods, waiting)
	p := testPlugin(b, newFakePods(pods...), newFakePhases(nil, 0))
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids(g[2].UUID, g[5].UUID)}}}
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		delete(p.progress, waiting.UID)
		start := time.Now()
		if _, err := p.Allocate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
