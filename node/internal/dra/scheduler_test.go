//go:build e2e

package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/scripts/harness"
)

// TestKubeSchedulerBooksTheDevices publishes a node's devices as the node
// role would, against a real kube-apiserver, and has a stock
// kube-scheduler (no extender) place pods whose claims ask for slices:
// the apiserver keeps every field (shared devices, request policies,
// taints), and the scheduler books memory, cores and slots as vgpud's
// extender would, defaults included, refusing a pod past any of them
// and never using the unhealthy GPU. scripts/e2e.sh runs it.
func TestKubeSchedulerBooksTheDevices(t *testing.T) {
	v := harness.Getenv(t, "make e2e", "KUBECONFIG", "VGPUD_K8S_BIN")
	kube := harness.Client(t, v[0], 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node, ns = "dra-a100", "dra-e2e"
	readyNode(t, ctx, kube, node)
	claimNamespace(t, ctx, kube, ns)

	inv := testInventory()
	inv.MIG = nil
	driver, prep, dir := startDriver(t, ctx, kube, node)
	if err := driver.Publish(ctx, inv, dradevices.Marks{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the node's ResourceSlice as published", func() error {
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(list.Items) != 1 {
			return fmt.Errorf("%d slices, %v", len(list.Items), err)
		}
		s := list.Items[0]
		if s.Spec.Driver != dradevices.DriverName || s.Spec.Pool.Name != node || len(s.Spec.Devices) != 2 {
			return fmt.Errorf("slice %+v", s.Spec)
		}
		a, b := s.Spec.Devices[0], s.Spec.Devices[1]
		if a.AllowMultipleAllocations == nil || !*a.AllowMultipleAllocations || a.Capacity[dradevices.CapacityMemory].RequestPolicy == nil ||
			a.Capacity[dradevices.CapacitySlots].RequestPolicy == nil || len(b.Taints) != 1 {
			return fmt.Errorf("the apiserver dropped fields: %+v", s.Spec.Devices)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].Name != node {
			return fmt.Errorf("owners %v; want the Node", s.OwnerReferences)
		}
		return nil
	})
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: dradevices.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == %q`, dradevices.DriverName, dradevices.DriverName, dradevices.TypeGPU)}}}},
	}
	if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	sched := spawnScheduler(t, v[0], v[1])
	defer sched.Stop(t)

	// gpu-0: 40 GiB, 100 cores, split 4 (a default of 25 cores); gpu-1
	// (60 GiB) is unhealthy. In order, each waits for the last.
	for _, c := range []struct {
		name     string
		requests map[resourceapi.QualifiedName]string
		fits     bool
		consumed string // memory/cores/slots
	}{
		{"named", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "20Gi", dradevices.CapacityCores: "30"}, true, "20Gi/30/1"},
		// The default is the whole memory: only the unhealthy GPU has it.
		{"defaults", nil, false, ""},
		{"memory-only", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "16Gi"}, true, "16Gi/25/1"},
		{"all-cores", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "100"}, false, ""},
		{"over-a-gpu", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "150"}, false, ""},
		{"third", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "1"}, true, "1Gi/1/1"},
		{"fourth", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "0"}, true, "1Gi/1/1"},
		// Memory (2 GiB) and cores (43) are left; the four slots are not.
		{"fifth", map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "1"}, false, ""},
	} {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dradevices.DriverName, Capacity: capacity(c.requests)}}},
		}}}
		if _, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s: %v", c.name, err)
		}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, claimPod(c.name, node, claim.Name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", c.name, err)
		}
		got := "scheduled"
		if why := placed(t, ctx, kube, ns, c.name); why != "" {
			got = "unschedulable: " + why
		}
		if c.fits != (got == "scheduled") {
			t.Fatalf("pod %s: %s; want fits=%v", c.name, got, c.fits)
		}
		if !c.fits {
			t.Logf("%-12s %s", c.name, got)
			continue
		}
		cl, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil || cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s: %+v, %v", c.name, cl.Status, err)
		}
		r := cl.Status.Allocation.Devices.Results[0]
		consumed := fmt.Sprintf("%s/%s/%s", qs(r.ConsumedCapacity[dradevices.CapacityMemory]), qs(r.ConsumedCapacity[dradevices.CapacityCores]), qs(r.ConsumedCapacity[dradevices.CapacitySlots]))
		if r.Driver != dradevices.DriverName || r.Pool != node || r.Device != dradevices.DeviceName(inv.GPUs[0].UUID) || r.ShareID == nil || consumed != c.consumed {
			t.Errorf("claim %s: %s/%s/%s share %v consumed %s; want %s on gpu-0, shared", c.name, r.Driver, r.Pool, r.Device, r.ShareID, consumed, c.consumed)
		}
		t.Logf("%-12s on %s, share %s, consumed %s", c.name, r.Device, *r.ShareID, consumed)
	}

	// gpu-1 recovers: the node publishes it untainted, and the pod that
	// waited for a whole GPU's memory gets it, with gpu-1's defaults.
	inv.GPUs[1].Healthy = true
	if err := driver.Publish(ctx, inv, dradevices.Marks{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "the waiting pod placed on the recovered GPU", func() error {
		cl, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, "defaults", metav1.GetOptions{})
		if err != nil || cl.Status.Allocation == nil {
			return fmt.Errorf("not allocated (%v)", err)
		}
		r := cl.Status.Allocation.Devices.Results[0]
		consumed := fmt.Sprintf("%s/%s/%s", qs(r.ConsumedCapacity[dradevices.CapacityMemory]), qs(r.ConsumedCapacity[dradevices.CapacityCores]), qs(r.ConsumedCapacity[dradevices.CapacitySlots]))
		if r.Device != dradevices.DeviceName(inv.GPUs[1].UUID) || consumed != "60Gi/20/1" {
			t.Fatalf("defaults: on %s consumed %s; want gpu-1 60Gi/20/1 (its memory, a tenth of its 200 cores)", r.Device, consumed)
		}
		return nil
	})

	// kubelet's call for the first claim, over the driver's socket: the
	// helper reads the claim from the apiserver, and the node prepares
	// the share the scheduler booked.
	named, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, "named", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "plugin", "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: "named", Uid: string(named.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Claims[string(named.UID)]
	if r == nil || r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != dradevices.DeviceName(inv.GPUs[0].UUID) || r.Devices[0].CdiDeviceIds[0] != ClaimKind+"="+cdiDevice(string(named.UID), 0) {
		t.Fatalf("NodePrepareResources: %v", resp)
	}
	got, ok := prep.Claim(string(named.UID))
	if !ok || len(got.Grants) != 1 || got.Grants[0].MemoryMiB != 20480 || got.Grants[0].Cores != 30 || len(got.Pods) != 1 {
		t.Fatalf("prepared %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "vgpud-claim-"+string(named.UID)+".json")); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet's NodePrepareResources for %q: %s, %d MiB, %d cores for pod %s", "named", r.Devices[0].CdiDeviceIds[0], got.Grants[0].MemoryMiB, got.Grants[0].Cores, got.Pods[0])
}
