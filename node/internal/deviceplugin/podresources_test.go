package deviceplugin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestCheckPodResources(t *testing.T) {
	g := testGPUs(8)
	ok := boundPod("ok", "n1", [][]string{{g[0].UUID}}, [][]string{{g[1].UUID}}, []int64{1000, 2000})
	wrong := boundPod("wrong", "n1", nil, [][]string{{g[2].UUID}}, []int64{1000})
	inFlight := boundPod("inflight", "n1", nil, [][]string{{g[3].UUID}}, []int64{1000})
	ok.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	wrong.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	devices := []kubeletapi.PodDevices{
		// The app container reuses the init container's device: fine.
		{Namespace: "default", Name: "ok", Containers: map[string][]string{"init0": {deviceID(g[0].UUID, 1)}, "app0": {deviceID(g[0].UUID, 1)}}},
		{Namespace: "default", Name: "wrong", Containers: map[string][]string{"app0": {deviceID(g[5].UUID, 4)}}},
		// Not allocated yet: not judged.
		{Namespace: "default", Name: "inflight", Containers: map[string][]string{"app0": {deviceID(g[6].UUID, 0)}}},
	}
	checked, got := CheckPodResources("n1", []*corev1.Pod{ok, wrong, inFlight}, devices)
	if checked != 2 || len(got) != 1 || got[0].Pod.Name != "wrong" || !strings.Contains(got[0].Message, `container "app0" holding devices `+deviceID(g[5].UUID, 4)) || !strings.Contains(got[0].Message, g[2].UUID) {
		t.Fatalf("mismatches %+v", got)
	}
}
