package books

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// allocated is a claim kube-scheduler allocated: each result a device of
// pool's, with consumed memory and cores where mem is not "".
func allocated(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}}
	if len(results) > 0 {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	return c
}

func result(driver, pool, uuid, mem, cores string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: dradevices.DeviceName(uuid)}
	if mem != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{dradevices.CapacityMemory: resource.MustParse(mem), dradevices.CapacityCores: resource.MustParse(cores)}
	}
	return r
}

// A node moved back from DRA to the device plugin while claims' pods
// run there: what kube-scheduler allocated them of its GPUs is taken for
// the extender, a share what it consumed and a device held whole all of
// it, until the claim is deallocated or deleted, which frees it. Another
// driver's devices, and a device the node does not list, count nothing.
func TestClaimsHoldTheirShares(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	freed := 0
	c.NotifyFreed(func() { freed++ })
	c.SetNode(gpuNode("n1", 2, "80"))
	c.SetClaim(allocated("share", result(dradevices.DriverName, "n1", "GPU-n1-0", "4Gi", "30")))
	c.SetClaim(allocated("whole", result(dradevices.DriverName, "n1", "GPU-n1-1", "", "")))
	c.SetClaim(allocated("foreign", result("gpu.nvidia.com", "n1", "GPU-n1-0", "8Gi", "50"), result(dradevices.DriverName, "n1", "GPU-gone", "1Gi", "1")))
	n, r := c.Node("n1")
	if r != nil {
		t.Fatal(r)
	}
	if u := n.GPUs[0].Used; u.MemMiB != 4096 || u.Cores != 30 || u.Slots != 1 {
		t.Errorf("GPU 0 holds %+v; want the share's 4096 MiB, 30 cores, one slot", u)
	}
	if u := n.GPUs[1].Used; u.MemMiB != 40000 || u.Cores != 100 || !u.Exclusive {
		t.Errorf("GPU 1 holds %+v; want all of it", u)
	}
	// The share moves to another node's pool: n1's GPU 0 is free.
	c.SetNode(gpuNode("n2", 1, "40"))
	freed = 0
	c.SetClaim(allocated("share", result(dradevices.DriverName, "n2", "GPU-n2-0", "4Gi", "30")))
	n, _ = c.Node("n1")
	n2, _ := c.Node("n2")
	if !n.GPUs[0].Used.Idle() || n2.GPUs[0].Used.MemMiB != 4096 || freed != 1 {
		t.Errorf("after the move: n1 GPU 0 %+v, n2 GPU 0 %+v, freed told %d times", n.GPUs[0].Used, n2.GPUs[0].Used, freed)
	}
	c.SetClaim(allocated("whole")) // deallocated
	c.DeleteClaim("share")
	n, _ = c.Node("n1")
	n2, _ = c.Node("n2")
	if !n.GPUs[1].Used.Idle() || !n2.GPUs[0].Used.Idle() || freed != 3 {
		t.Errorf("after deallocation and deletion: n1 GPU 1 %+v, n2 GPU 0 %+v, freed told %d times", n.GPUs[1].Used, n2.GPUs[0].Used, freed)
	}
}

// A claim of a MIG instance holds the instance whole, as the extender
// books one.
func TestAClaimHoldsItsMIGInstance(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	raw, err := protocol.EncodeInventory(migInventory())
	if err != nil {
		t.Fatal(err)
	}
	c.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("12")}}})
	c.SetClaim(allocated("mig", result(dradevices.DriverName, "n1", "MIG-b", "", "")))
	n, r := c.Node("n1")
	if r != nil {
		t.Fatal(r)
	}
	for _, g := range n.GPUs {
		if want := g.GPU.UUID == "MIG-b"; g.Used.Idle() == want {
			t.Errorf("%s holds %+v; want only MIG-b held", g.GPU.UUID, g.Used)
		}
	}
}

// Quota charges an allocated claim as bind charges a pod's placement: a
// small share at least a slot's share of its GPU, a MIG instance whole,
// a device the books do not know what it consumed; another driver's
// devices nothing.
func TestClaimCharge(t *testing.T) {
	c := New(wellknown.DefaultResourceNames(), "vgpud-scheduler", clock.RealClock{})
	c.SetNode(gpuNode("n1", 1, "40")) // 40000 MiB, split 40: a slot is 1000 MiB
	raw, err := protocol.EncodeInventory(migInventory())
	if err != nil {
		t.Fatal(err)
	}
	c.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m1", Annotations: map[string]string{wellknown.AnnotationGPUs: raw, wellknown.AnnotationPlugin: wellknown.PluginServing}}})
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		mem   int64
		ok    bool
	}{
		{"a small share", allocated("s", result(dradevices.DriverName, "n1", "GPU-n1-0", "100Mi", "1")), 1000, true},
		{"a large share", allocated("l", result(dradevices.DriverName, "n1", "GPU-n1-0", "3000Mi", "5")), 3000, true},
		{"a MIG instance", allocated("m", result(dradevices.DriverName, "m1", "MIG-a", "", "")), 19968, true},
		{"an unknown node", allocated("u", result(dradevices.DriverName, "gone", "GPU-gone-0", "3000Mi", "5")), 3000, true},
		{"one device known, one gone", allocated("k", result(dradevices.DriverName, "n1", "GPU-n1-0", "100Mi", "1"), result(dradevices.DriverName, "gone", "GPU-gone-0", "3000Mi", "5")), 4000, true},
		{"another driver's", allocated("o", result("gpu.nvidia.com", "n1", "GPU-n1-0", "3000Mi", "5")), 0, false},
		{"not allocated", allocated("n"), 0, false},
	} {
		u, ok := c.ClaimCharge(tc.claim)
		if u.MemMiB != tc.mem || ok != tc.ok {
			t.Errorf("%s: charged %+v (%v); want %d MiB (%v)", tc.name, u, ok, tc.mem, tc.ok)
		}
	}
}
