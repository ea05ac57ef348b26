package inspect

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestUsageListsMIGInstances(t *testing.T) {
	inv := protocol.Inventory{
		GPUs: []protocol.GPU{{UUID: "GPU-a", Index: 0, Model: "L4", MemoryMiB: 23034, Cores: 100, Split: 10, Healthy: true}},
		MIG: []protocol.MIGGPU{{UUID: "GPU-m", Index: 1, Model: "A100-SXM4-40GB", MemoryMiB: 40960, SMs: 98, Healthy: true,
			Instances: []protocol.MIGInstance{{UUID: "MIG-small-0001", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 6, Size: 1}}}},
	}
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "MIG-small-0001", MemoryMiB: 4864, Cores: 15, MIG: true}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{wellknown.AnnotationAssignment: raw}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	gpus, allocs := Usage("n1", inv, []*corev1.Pod{p}, nil)
	if len(gpus) != 2 || len(allocs) != 1 {
		t.Fatalf("%d rows, %d allocations", len(gpus), len(allocs))
	}
	m := gpus[1]
	if m.MIG != "1g.5gb" || m.Parent != "GPU-m" || m.Index != 1 || m.MemoryUsedMiB != 4864 || m.CoresUsed != 15 || m.Cores != 15 || m.SlicesUsed != 1 || m.Slices != 1 {
		t.Errorf("instance row %+v", m)
	}
	var out bytes.Buffer
	if err := Render(&out, inspectv1.NodeSnapshot{Node: "n1", GPUs: gpus, Allocations: allocs}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "A100-SXM4-40GB MIG 1g.5gb") {
		t.Errorf("render:\n%s", out.String())
	}
}
