//go:build e2e

package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/scripts/harness"
)

// TestWhatTheAllocatorDecides shows, against a real kube-apiserver and a
// stock kube-scheduler, what DRA mode does for each of vgpud's placement
// rules (docs/dra.md's table): a GPU policy annotation is not read and
// claims fill the first GPU that fits; `cores: 100` holds a GPU alone as
// mutex does; matchAttribute keeps a claim's GPUs on one NUMA node or in
// one NVLink set, and distinctAttribute keeps them apart; an existing MIG
// instance is allocated whole and none is made on demand; ResourceQuota
// counts devices per class, not memory. scripts/e2e.sh runs it.
func TestWhatTheAllocatorDecides(t *testing.T) {
	v := harness.Getenv(t, "make e2e", "KUBECONFIG", "VGPUD_K8S_BIN")
	kube := harness.Client(t, v[0], 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node, ns = "dra-dgx", "dra-allocator"
	readyNode(t, ctx, kube, node)
	claimNamespace(t, ctx, kube, ns)

	// Four 40 GiB GPUs, split 8: 0 and 3 on NUMA node 0, 1 and 2 on
	// node 1; NVLink joins 0 with 2 and 1 with 3. GPU 4 is in MIG mode.
	inv := protocol.Inventory{Sets: []protocol.GPUSet{{Link: protocol.LinkNVLink, GPUs: []int{0, 2}}, {Link: protocol.LinkNVLink, GPUs: []int{1, 3}}}}
	for i, numa := range []int{0, 1, 1, 0} {
		inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Cores: 100, Split: 8, NUMA: numa, Healthy: true})
	}
	inv.MIG = []protocol.MIGGPU{{UUID: "GPU-4", Index: 4, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, SMs: 98, Healthy: true, Instances: []protocol.MIGInstance{
		{UUID: "MIG-3g", Profile: "3g.20gb", MemoryMiB: 20096, SMs: 42, Start: 4, Size: 4},
		{UUID: "MIG-1g", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 0, Size: 1},
	}}}
	publish(t, ctx, kube, node, inv)
	for name, typ := range map[string]string{"vgpud-gpu": dradevices.TypeGPU, "vgpud-mig": dradevices.TypeMIG} {
		class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == %q`, dradevices.DriverName, dradevices.DriverName, typ)}}}}}
		if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	sched := spawnScheduler(t, v[0], v[1])
	defer sched.Stop(t)

	a := allocator{t: t, ctx: ctx, kube: kube, ns: ns, node: node}
	gpu := func(i int) string { return dradevices.DeviceName(fmt.Sprintf("GPU-%d", i)) }
	slice := map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "10"}
	one := func(class string, selector string) resourceapi.DeviceRequest {
		r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
		if class == "vgpud-gpu" {
			r.Exactly.Capacity = capacity(slice)
		}
		if selector != "" {
			r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		return r
	}

	// Spread and binpack: the allocator reads no GPU policy and takes
	// the first GPU that fits, in the order the node published (index).
	spread := map[string]string{"vgpud.io/gpu-policy": "spread", "hami.io/gpu-scheduler-policy": "spread"}
	for _, name := range []string{"spread-1", "spread-2"} {
		if got := a.place(name, spread, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("vgpud-gpu", "")}}); fmt.Sprint(got) != fmt.Sprint([]string{gpu(0)}) {
			t.Errorf("%s under a spread policy: %v; want the first GPU, %s (policies not read)", name, got, gpu(0))
		}
	}

	// Mutex: a claim of every core takes an idle GPU alone (GPU 1, as 0
	// is shared), and no later claim joins it.
	whole := one("vgpud-gpu", "")
	whole.Exactly.Capacity = capacity(map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "100"})
	if got := a.place("whole", nil, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{whole}}); fmt.Sprint(got) != fmt.Sprint([]string{gpu(1)}) {
		t.Errorf("100 cores: %v; want the first idle GPU, %s", got, gpu(1))
	}
	onOne := fmt.Sprintf(`device.attributes[%q].uuid == "GPU-1"`, dradevices.DriverName)
	if got := a.place("join-whole", nil, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("vgpud-gpu", onOne)}}); got != nil {
		t.Errorf("a claim aimed at the GPU held whole: %v; want it refused", got)
	}

	// Several GPUs in one claim: two requests could take one shared GPU
	// twice, which the node refuses (one container names a GPU once), so
	// a claim keeps them apart with distinctAttribute on the UUID, and
	// together with matchAttribute on the NUMA node or the NVLink set.
	pair := func(constraints ...resourceapi.DeviceConstraint) resourceapi.DeviceClaim {
		r1, r2 := one("vgpud-gpu", ""), one("vgpud-gpu", "")
		r1.Name, r2.Name = "a", "b"
		return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r1, r2}, Constraints: constraints}
	}
	attr := func(name string) *resourceapi.FullyQualifiedName {
		n := resourceapi.FullyQualifiedName(dradevices.DriverName + "/" + name)
		return &n
	}
	distinct := resourceapi.DeviceConstraint{DistinctAttribute: attr(dradevices.AttrUUID)}
	if got := a.place("pair-plain", nil, pair()); len(got) != 2 || got[0] != gpu(0) || got[1] != gpu(0) {
		t.Errorf("two requests without a constraint: %v; want GPU 0 twice (the allocator's first fit)", got)
	}
	if got := a.place("pair-distinct", nil, pair(distinct)); fmt.Sprint(got) != fmt.Sprint([]string{gpu(0), gpu(2)}) {
		t.Errorf("distinctAttribute uuid: %v; want GPUs 0 and 2 (1 is held whole)", got)
	}
	// The same as one request of count 2, as docs/dra.md shows it.
	numa := resourceapi.DeviceConstraint{MatchAttribute: attr(dradevices.AttrNUMANode)}
	two := one("vgpud-gpu", "")
	two.Exactly.Count = 2
	if got := a.place("pair-numa", nil, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{two}, Constraints: []resourceapi.DeviceConstraint{distinct, numa}}); fmt.Sprint(got) != fmt.Sprint([]string{gpu(0), gpu(3)}) {
		t.Errorf("matchAttribute numaNode: %v; want GPUs 0 and 3 (NUMA node 0)", got)
	}
	nvlink := resourceapi.DeviceConstraint{MatchAttribute: attr(dradevices.AttrNVLinkSet)}
	if got := a.place("pair-nvlink", nil, pair(distinct, nvlink)); fmt.Sprint(got) != fmt.Sprint([]string{gpu(0), gpu(2)}) {
		t.Errorf("matchAttribute nvlinkSet: %v; want GPUs 0 and 2 (joined by NVLink)", got)
	}

	// MIG: an existing instance is allocated whole, once; a profile no
	// instance has waits, as the node makes none on demand.
	profile := func(p string) string {
		return fmt.Sprintf(`device.attributes[%q].profile == %q`, dradevices.DriverName, p)
	}
	if got := a.place("mig-1g", nil, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("vgpud-mig", profile("1g.5gb"))}}); fmt.Sprint(got) != fmt.Sprint([]string{dradevices.DeviceName("MIG-1g")}) {
		t.Errorf("a 1g.5gb instance: %v; want MIG-1g", got)
	}
	for _, c := range []struct{ name, profile string }{{"mig-1g-again", "1g.5gb"}, {"mig-2g", "2g.10gb"}} {
		if got := a.place(c.name, nil, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("vgpud-mig", profile(c.profile))}}); got != nil {
			t.Errorf("%s: %v; want it pending (held, or no such instance)", c.name, got)
		}
	}

	// Quota: ResourceQuota counts a class's devices per namespace, so
	// one of 1 GiB and one of the whole GPU's memory each count one, and
	// nvidia.com/gpumem's limit does not see a claim at all.
	const qns = "dra-allocator-quota"
	harness.EnsureNamespace(t, kube, qns, nil)
	devices := corev1.ResourceName("vgpud-gpu.deviceclass.resource.k8s.io/devices")
	hard := corev1.ResourceList{devices: resource.MustParse("2"), "requests.nvidia.com/gpumem": resource.MustParse("1024")}
	q, err := kube.CoreV1().ResourceQuotas(qns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controller-manager here: the quota's status is set as its
	// controller would, to nothing used.
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{devices: resource.MustParse("0"), "requests.nvidia.com/gpumem": resource.MustParse("0")}}
	if _, err := kube.CoreV1().ResourceQuotas(qns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimOf := func(i int, mem string) *resourceapi.ResourceClaim {
		r := one("vgpud-gpu", "")
		r.Exactly.Capacity = capacity(map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: mem})
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quota-%d", i)}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}}}
	}
	// The apiserver's quota admission counts only once its own informer
	// has the status set above: until a claim shows in the quota's used
	// devices, it is taken back and made again.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := kube.ResourceV1().ResourceClaims(qns).Create(ctx, claimOf(0, "1Gi"), metav1.CreateOptions{}); err != nil {
			return false, err
		}
		q, err := kube.CoreV1().ResourceQuotas(qns).Get(ctx, "gpus", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if used := q.Status.Used[devices]; used.Value() == 1 {
			return true, nil
		}
		return false, kube.ResourceV1().ResourceClaims(qns).Delete(ctx, "quota-0", metav1.DeleteOptions{})
	}); err != nil {
		t.Fatalf("the quota never counted a claim: %v", err)
	}
	for i, mem := range []string{"1Gi", "40Gi", "1Mi"} {
		if i == 0 {
			t.Logf("quota: a claim of %s memory: counted", mem)
			continue // made above
		}
		_, err := kube.ResourceV1().ResourceClaims(qns).Create(ctx, claimOf(i, mem), metav1.CreateOptions{})
		if want := i < 2; want != (err == nil) || (err != nil && !strings.Contains(err.Error(), "exceeded quota")) {
			t.Fatalf("claim %d of %s memory under a quota of 2 devices and 1024 MiB gpumem: %v; want admitted=%v", i, mem, err, want)
		}
		t.Logf("quota: a claim of %s memory: %v", mem, err)
	}
}

// allocator places one pod per claim on the test's node and reads what
// kube-scheduler allocated.
type allocator struct {
	t        *testing.T
	ctx      context.Context
	kube     kubernetes.Interface
	ns, node string
}

// place creates a claim and a pod using it, and returns the devices
// allocated in request order, or nil where the pod stays unschedulable.
func (a allocator) place(name string, annotations map[string]string, spec resourceapi.DeviceClaim) []string {
	a.t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimSpec{Devices: spec}}
	if _, err := a.kube.ResourceV1().ResourceClaims(a.ns).Create(a.ctx, claim, metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("claim %s: %v", name, err)
	}
	if _, err := a.kube.CoreV1().Pods(a.ns).Create(a.ctx, claimPod(name, a.node, claim.Name, annotations), metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("pod %s: %v", name, err)
	}
	if why := placed(a.t, a.ctx, a.kube, a.ns, name); why != "" {
		a.t.Logf("%-14s unschedulable: %s", name, why)
		return nil
	}
	cl, err := a.kube.ResourceV1().ResourceClaims(a.ns).Get(a.ctx, name, metav1.GetOptions{})
	if err != nil || cl.Status.Allocation == nil {
		a.t.Fatalf("claim %s: %+v, %v", name, cl.Status, err)
	}
	var got []string
	for _, r := range cl.Status.Allocation.Devices.Results {
		got = append(got, r.Device)
	}
	a.t.Logf("%-14s on %v", name, got)
	return got
}
