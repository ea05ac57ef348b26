package quota

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func gpuClaim(name, ns, class string, count int64, capacity map[resourceapi.QualifiedName]string) *resourceapi.ResourceClaim {
	r := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	if capacity != nil {
		r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for k, v := range capacity {
			r.Capacity.Requests[k] = resource.MustParse(v)
		}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: r}}}}}
}

// A claim is charged as a container asking the same: its memory (whole
// MiB, rounded up) and cores times its count; one naming no memory, or
// every core, a whole GPU; claims of other classes nothing.
func TestClaimsUsage(t *testing.T) {
	mem, cores := resourceapi.QualifiedName(dradevices.CapacityMemory), resourceapi.QualifiedName(dradevices.CapacityCores)
	for _, c := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  podmodel.Usage
	}{
		{"slice", gpuClaim("a", "ai", "vgpud-gpu", 2, map[resourceapi.QualifiedName]string{mem: "4Gi", cores: "30"}), podmodel.Usage{MemMiB: 8192, Cores: 60, Slots: 2}},
		{"rounded", gpuClaim("a", "ai", "vgpud-gpu", 1, map[resourceapi.QualifiedName]string{mem: "1000000"}), podmodel.Usage{MemMiB: 1, Slots: 1}},
		{"no memory", gpuClaim("a", "ai", "vgpud-gpu", 1, map[resourceapi.QualifiedName]string{cores: "10"}), podmodel.Usage{MemMiB: 40960, Cores: 100, Slots: 1}},
		{"every core", gpuClaim("a", "ai", "vgpud-gpu", 1, map[resourceapi.QualifiedName]string{mem: "1Gi", cores: "100"}), podmodel.Usage{MemMiB: 40960, Cores: 100, Slots: 1, Exclusive: true}},
		{"another class", gpuClaim("a", "ai", "other", 1, nil), podmodel.Usage{}},
	} {
		if got := ClaimsUsage([]*resourceapi.ResourceClaim{c.claim}, "vgpud-gpu", 40960, nil); got != c.want {
			t.Errorf("%s: %+v; want %+v", c.name, got, c.want)
		}
	}
	// Once allocated, what it consumes counts where it is more: the
	// default cores it left out, a share reached through another class.
	allocated := func(c *resourceapi.ResourceClaim, memQ, coresQ string) *resourceapi.ResourceClaim {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: dradevices.DriverName, Pool: "n1", Device: "gpu-0",
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{mem: resource.MustParse(memQ), cores: resource.MustParse(coresQ)}}}}}
		return c
	}
	for _, c := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  podmodel.Usage
	}{
		{"default cores", allocated(gpuClaim("a", "ai", "vgpud-gpu", 1, map[resourceapi.QualifiedName]string{mem: "1Gi"}), "1Gi", "25"), podmodel.Usage{MemMiB: 1024, Cores: 25, Slots: 1}},
		{"another class", allocated(gpuClaim("a", "ai", "admins-broad-class", 1, nil), "3Gi", "10"), podmodel.Usage{MemMiB: 3072, Cores: 10, Slots: 1}},
	} {
		if got := ClaimsUsage([]*resourceapi.ResourceClaim{c.claim}, "vgpud-gpu", 40960, nil); got != c.want {
			t.Errorf("%s: %+v; want %+v", c.name, got, c.want)
		}
	}
	all := gpuClaim("a", "ai", "vgpud-gpu", 0, nil)
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	if _, err := dradevices.ClaimRequests(&all.Spec, "vgpud-gpu"); err == nil || !strings.Contains(err.Error(), "ask a count") {
		t.Errorf("allocationMode All: %v", err)
	}
	first := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: "vgpud-gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{mem: resource.MustParse("8Gi")}}},
		{Name: "small", DeviceClassName: "vgpud-gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{mem: resource.MustParse("1Gi")}}},
	}}}}}
	if cs, err := dradevices.ClaimRequests(first, "vgpud-gpu"); err != nil || len(cs) != 2 {
		t.Errorf("firstAvailable: %v, %v; want each alternative counted", cs, err)
	}
}

// The namespace's quota counts its pods and its claims, and claims the
// webhook admitted before the informer has them: two created at once
// cannot both take the last room. An admission the informer never shows
// (refused later) stops counting after inflightFor.
func TestSourceCountsClaims(t *testing.T) {
	kube := fake.NewClientset(
		gpuPod("a", "ai", "1", "10000", "", corev1.PodRunning),
		rq("q", "ai", map[string]string{"requests.nvidia.com/gpumem": "40000"}),
		gpuClaim("c1", "ai", "vgpud-gpu", 1, map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "10000Mi"}),
	)
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(slimpod.Transform(wellknown.DefaultResourceNames())))
	src := New(factory.Core().V1().Pods().Informer(), factory.Core().V1().ResourceQuotas().Informer(), wellknown.DefaultResourceNames())
	claims := factory.Resource().V1().ResourceClaims().Informer()
	// The books hold pod a as bind charged it.
	var lock sync.Mutex
	deps := ClaimDeps{Pods: func(string) (podmodel.Usage, error) { return podmodel.Usage{MemMiB: 10000}, nil },
		Lock: func(context.Context, string) (func(), error) { lock.Lock(); return lock.Unlock, nil }}
	if err := src.CountClaims(claims, "vgpud-gpu", func() int64 { return 40960 }, deps); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	src.claims.now = func() time.Time { return now }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	if got := src.NamespaceQuota("ai"); got.Memory.Used != 20000 {
		t.Fatalf("ai uses %d MiB; want 20000 (a pod and a claim)", got.Memory.Used)
	}
	if got := src.NamespaceLimits("ai"); got.Memory.Hard != 40000 || got.Memory.Used != 10000 {
		t.Fatalf("limits for bind %+v; want the claims' 10000 used", got.Memory)
	}
	ask := podmodel.Usage{MemMiB: 15000}
	refuse := func(q podmodel.Quota) string {
		if q.Memory.Used+ask.MemMiB > q.Memory.Hard {
			return "over"
		}
		return ""
	}
	if msg := src.AdmitClaim(ctx, "ai", "", "train-gpu-", ask, true, refuse); msg != "" {
		t.Fatalf("the first claim of 15000: %s", msg)
	}
	if msg := src.AdmitClaim(ctx, "ai", "other", "", ask, true, refuse); msg != "over" {
		t.Fatalf("a second claim of 15000 beside the first, not yet seen: %q; want refused", msg)
	}
	// The informer sees the first: it counts once.
	if _, err := kube.ResourceV1().ResourceClaims("ai").Create(ctx, gpuClaim("train-gpu-x7k2q", "ai", "vgpud-gpu", 1, map[resourceapi.QualifiedName]string{dradevices.CapacityMemory: "15000Mi"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Counted once both have it: the informer's store, and its handler
	// that drops the admission.
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		_, ok, _ := claims.GetIndexer().GetByKey("ai/train-gpu-x7k2q")
		return ok && src.NamespaceQuota("ai").Memory.Used == 35000, nil
	})
	if got := src.NamespaceQuota("ai").Memory.Used; got != 35000 {
		t.Fatalf("after the informer saw it: %d MiB used; want 35000", got)
	}
	// A dry run is checked and charges nothing.
	ask = podmodel.Usage{MemMiB: 5000}
	if msg := src.AdmitClaim(ctx, "ai", "dry", "", ask, false, refuse); msg != "" || src.NamespaceQuota("ai").Memory.Used != 35000 {
		t.Fatalf("a dry run: %q, %d used", msg, src.NamespaceQuota("ai").Memory.Used)
	}
	// One admitted and never created stops counting.
	if msg := src.AdmitClaim(ctx, "ai", "lost", "", ask, true, refuse); msg != "" {
		t.Fatal(msg)
	}
	if got := src.NamespaceQuota("ai").Memory.Used; got != 40000 {
		t.Fatalf("with one admitted: %d; want 40000", got)
	}
	now = now.Add(inflightFor)
	if got := src.NamespaceQuota("ai").Memory.Used; got != 35000 {
		t.Fatalf("%v later: %d; want 35000", inflightFor, got)
	}
	// The quota lock not had in time (a bind holds it past the
	// apiserver's wait): refused, and nothing charged.
	src.claims.bound.Lock = func(ctx context.Context, _ string) (func(), error) { return nil, context.DeadlineExceeded }
	if msg := src.AdmitClaim(ctx, "ai", "late", "", ask, true, refuse); !strings.Contains(msg, "could not check this claim against namespace ai's vGPU quota in time") {
		t.Fatalf("the lock not had: %q", msg)
	}
	if got := src.NamespaceQuota("ai").Memory.Used; got != 35000 {
		t.Fatalf("after a refusal for time: %d; want 35000", got)
	}
}
