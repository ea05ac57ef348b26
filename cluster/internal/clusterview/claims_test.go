package clusterview

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// DRA claims show beside the extender's pods: a share on the GPU row it
// was allocated (what it consumes, and a slot), the namespace charged by
// the leader's quota rule (a slot's share at least, once allocated), a device of no known GPU as a problem; -n
// keeps a GPU where only a claim of the namespace holds it.
func TestWithClaims(t *testing.T) {
	const sched = "vgpud-scheduler"
	names := wellknown.DefaultResourceNames()
	nodes := []corev1.Node{node(t, "n1", a100(0), a100(1))}
	pods := []corev1.Pod{pod(t, "ext", "p", sched, "n1", protocol.Assignment{Version: protocol.Version, Node: "n1",
		Containers: []protocol.ContainerAssignment{slice("GPU-a0", 4000, 10)}}, corev1.PodRunning)}
	claim := func(ns, name, device string, mem string, cores int64) resourceapi.ResourceClaim {
		c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "vgpud-gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{dradevices.CapacityMemory: resource.MustParse(mem)}}}}}}}}
		if device != "" {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: dradevices.DriverName, Pool: "n1", Device: device, ShareID: ptr.To(k8stypes.UID("s")),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{dradevices.CapacityMemory: resource.MustParse(mem), dradevices.CapacityCores: *resource.NewQuantity(cores, resource.DecimalSI), dradevices.CapacitySlots: resource.MustParse("1")},
			}}}}
		}
		return c
	}
	claims := []resourceapi.ResourceClaim{
		claim("ml", "a", dradevices.DeviceName("GPU-a0"), "2000Mi", 25),
		claim("ml", "waiting", "", "1000Mi", 0),
		claim("ml", "lost", "gpu-gone", "1000Mi", 5),
	}
	v := WithClaims(Build(nodes, pods, nil, sched, names, time.Unix(0, 0)), claims, "vgpud-gpu")
	g := v.Nodes[0].GPUs[0]
	if g.MemoryUsedMiB != 6000 || g.CoresUsed != 35 || g.SlotsUsed != 2 || strings.Join(g.Claims, ",") != "ml/a" || strings.Join(g.Pods, ",") != "ext/p" {
		t.Errorf("GPU 0: %+v; want the pod's 4000/10 and the claim's 2000/25, two slots", g)
	}
	// The allocated claim is charged at least a slot's share of its GPU
	// (4096 MiB at split 10), as bind charges the extender's pod beside
	// it; the others what they ask.
	if len(v.Namespaces) != 2 || v.Namespaces[1].Name != "ml" || v.Namespaces[1].MemoryUsedMiB != 6096 || v.Namespaces[0].MemoryUsedMiB != 4096 {
		t.Errorf("namespaces %+v; want ml charged 4096 + 1000 + 1000 MiB, allocated or not, and ext its pod's slot of 4096", v.Namespaces)
	}
	if len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "claim ml/lost") {
		t.Errorf("problems %v", v.Problems)
	}
	f := Filter(v, "ml", "")
	if len(f.Nodes) != 1 || len(f.Nodes[0].GPUs) != 1 || len(f.Nodes[0].GPUs[0].Pods) != 0 || len(f.Problems) != 1 {
		t.Errorf("-n ml: %+v", f)
	}
	var out bytes.Buffer
	if err := Render(&out, v, false); err != nil || !strings.Contains(out.String(), "ext/p, claim ml/a") {
		t.Errorf("tables: %v\n%s", err, out.String())
	}
}
