package dra

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/dradevices"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// fakeEdits is a node NVIDIA spec's edits for a GPU: its device node and
// the driver's, one mount; Edits has already dropped the env.
func fakeEdits(uuid string) (cdispecs.ContainerEdits, error) {
	if uuid == "GPU-unnamed" {
		return cdispecs.ContainerEdits{}, errors.New("no nvidia.com/gpu spec names GPU-unnamed")
	}
	return cdispecs.ContainerEdits{
		DeviceNodes: []*cdispecs.DeviceNode{{Path: "/dev/nvidia0"}, {Path: "/dev/nvidiactl"}},
		Mounts:      []*cdispecs.Mount{{HostPath: "/usr/lib/libcuda.so.1", ContainerPath: "/usr/lib/libcuda.so.1", Options: []string{"ro", "bind"}}},
	}, nil
}

type result struct {
	device   string
	shareID  string
	consumed map[string]string // nil: allocated whole
	admin    bool
	pool     string
}

func claimOn(uid, name string, pods []string, results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID(uid)}}
	alloc := &resourceapi.AllocationResult{}
	for i, r := range results {
		res := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: dradevices.DriverName, Pool: "n1", Device: r.device}
		if r.pool != "" {
			res.Pool = r.pool
		}
		if i > 0 {
			res.Request = "gpu" + string(rune('0'+i))
		}
		if r.shareID != "" {
			res.ShareID = ptr.To(types.UID(r.shareID))
		}
		if r.admin {
			res.AdminAccess = ptr.To(true)
		}
		if r.consumed != nil {
			res.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
			for k, v := range r.consumed {
				res.ConsumedCapacity[resourceapi.QualifiedName(k)] = resource.MustParse(v)
			}
		}
		alloc.Devices.Results = append(alloc.Devices.Results, res)
	}
	// Another driver's device in the same claim is none of vgpud's.
	alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: "net.example.com", Pool: "n1", Device: "eth1"})
	c.Status.Allocation = alloc
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p-" + p, UID: types.UID(p)})
	}
	return c
}

func consumed(mem, cores string) map[string]string {
	return map[string]string{dradevices.CapacityMemory: mem, dradevices.CapacityCores: cores, dradevices.CapacitySlots: "1"}
}

func newTestPreparer(t *testing.T, dir string) *Preparer {
	t.Helper()
	p, err := NewPreparer("n1", filepath.Join(dir, "dra-n1.json"), dir, fakeEdits, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p.Offer(testInventory(), dradevices.Marks{})
	return p
}

func prepareOne(t *testing.T, p *Preparer, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	out, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || len(out) != 1 {
		t.Fatalf("prepare %s: %v, %d results", c.Name, err, len(out))
	}
	return out[c.UID]
}

// A shared GPU's claim is prepared as its consumed share: its CDI
// device brings the GPU's device nodes and mounts and no env, and the
// record names the pods it was reserved for. A restarted node role
// reads the same record; unprepare undoes it, twice over too.
func TestPrepareRecordsTheShare(t *testing.T) {
	dir := t.TempDir()
	p := newTestPreparer(t, dir)
	c := claimOn("uid-1", "train", []string{"pod-a"}, result{device: "gpu-a", shareID: "s1", consumed: consumed("10Gi", "30")})
	res := prepareOne(t, p, c)
	if res.Err != nil || len(res.Devices) != 1 {
		t.Fatalf("prepare: %+v", res)
	}
	d := res.Devices[0]
	if d.PoolName != "n1" || d.DeviceName != "gpu-a" || strings.Join(d.CDIDeviceIDs, ",") != "gpu.vgpud.io/claim=uid-1-0" || strings.Join(d.Requests, ",") != "gpu" {
		t.Errorf("device %+v", d)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "vgpud-claim-uid-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispecs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil || spec.Kind != ClaimKind || len(spec.Devices) != 1 || spec.Devices[0].Name != "uid-1-0" ||
		len(spec.Devices[0].ContainerEdits.DeviceNodes) != 2 || len(spec.Devices[0].ContainerEdits.Env) != 0 || spec.Version == "" {
		t.Errorf("CDI spec %s (%v)", raw, err)
	}
	want := Prepared{Namespace: "team", Name: "train", Pods: []string{"pod-a"}, Grants: []Grant{
		{Request: "gpu", Device: "gpu-a", UUID: "GPU-a", MemoryMiB: 10240, Cores: 30, Slots: 1, Share: true, ShareID: "s1", CDI: "uid-1-0", Nodes: []string{"/dev/nvidia0", "/dev/nvidiactl"}}}}
	for _, pr := range []*Preparer{p, newTestPreparer(t, dir)} {
		got, ok := pr.Claim("uid-1")
		if !ok || !equalJSON(got, want) {
			t.Errorf("recorded %+v; want %+v", got, want)
		}
	}
	// Prepared again (kubelet restarted): the same answer.
	if again := prepareOne(t, p, c); again.Err != nil || again.Devices[0].CDIDeviceIDs[0] != d.CDIDeviceIDs[0] {
		t.Errorf("prepared again: %+v", again)
	}
	for range 2 {
		out, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "uid-1", NamespacedName: types.NamespacedName{Namespace: "team", Name: "train"}}})
		if err != nil || out["uid-1"] != nil {
			t.Fatalf("unprepare: %v %v", out, err)
		}
	}
	if _, ok := newTestPreparer(t, dir).Claim("uid-1"); ok {
		t.Error("an unprepared claim is still in the record")
	}
	if _, err := os.Stat(filepath.Join(dir, "vgpud-claim-uid-1.json")); !os.IsNotExist(err) {
		t.Errorf("the CDI spec is still there: %v", err)
	}
}

// What vgpud did not offer is refused with a reason, and nothing is
// recorded for it; a device allocated whole (no consumable capacity) is
// held whole.
func TestPrepareRefusesWhatWasNotOffered(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    result
		want string
	}{
		{"another node's pool", result{device: "gpu-a", pool: "n2", consumed: consumed("1Gi", "1")}, "not this node's"},
		{"a device not published", result{device: "gpu-zz", consumed: consumed("1Gi", "1")}, "publishes no such device"},
		{"admin access", result{device: "gpu-a", admin: true, consumed: consumed("1Gi", "1")}, "admin access"},
		{"memory past the GPU", result{device: "gpu-a", consumed: consumed("41Gi", "1")}, "consumed memory"},
		{"a part of a MiB", result{device: "gpu-a", consumed: consumed("1000Ki", "1")}, "consumed memory"},
		{"no cores", result{device: "gpu-a", consumed: consumed("1Gi", "0")}, "consumed cores"},
		{"cores past one GPU", result{device: "gpu-b", consumed: consumed("1Gi", "150")}, "consumed cores"},
		{"two slots", result{device: "gpu-a", consumed: map[string]string{dradevices.CapacityMemory: "1Gi", dradevices.CapacityCores: "1", dradevices.CapacitySlots: "2"}}, "consumed slots"},
	} {
		p := newTestPreparer(t, t.TempDir())
		res := prepareOne(t, p, claimOn("uid-x", tc.name, []string{"pod-a"}, tc.r))
		if res.Err == nil || !strings.Contains(res.Err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, res.Err, tc.want)
		}
		if _, ok := p.Claim("uid-x"); ok {
			t.Errorf("%s: recorded", tc.name)
		}
	}
	// A share of a GPU may serve several pods: the node holds them to it
	// together.
	p := newTestPreparer(t, t.TempDir())
	if res := prepareOne(t, p, claimOn("uid-2", "two", []string{"pod-a", "pod-b"}, result{device: "gpu-a", consumed: consumed("1Gi", "1")})); res.Err != nil {
		t.Errorf("a share for two pods: %v", res.Err)
	}
	p = newTestPreparer(t, t.TempDir())
	if res := prepareOne(t, p, claimOn("uid-w", "whole", []string{"pod-a", "pod-b"}, result{device: "gpu-a"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, _ := p.Claim("uid-w"); got.Grants[0].MemoryMiB != 40960 || got.Grants[0].Cores != 100 || got.Grants[0].Slots != 4 {
		t.Errorf("whole: %+v", got.Grants)
	}
}

// Claims prepared on a device never sum past it, whatever the
// scheduler said: memory, cores and slots each, and a MIG instance is
// one claim's.
func TestPrepareRefusesADoubleBooking(t *testing.T) {
	p := newTestPreparer(t, t.TempDir())
	for i, c := range []struct {
		r  result
		ok bool
	}{
		{result{device: "gpu-a", consumed: consumed("30Gi", "50")}, true},
		{result{device: "gpu-a", consumed: consumed("11Gi", "1")}, false}, // 41 of 40 GiB
		{result{device: "gpu-a", consumed: consumed("1Gi", "51")}, false}, // 101 cores
		{result{device: "gpu-a", consumed: consumed("1Gi", "1")}, true},
		{result{device: "gpu-a", consumed: consumed("1Gi", "1")}, true},
		{result{device: "gpu-a", consumed: consumed("1Gi", "1")}, true},
		{result{device: "gpu-a", consumed: consumed("1Gi", "1")}, false}, // a fifth of 4 slots
		{result{device: "mig-2"}, true},
		{result{device: "mig-2"}, false},
	} {
		uid := "uid-" + string(rune('a'+i))
		res := prepareOne(t, p, claimOn(uid, uid, []string{"pod-" + uid}, c.r))
		if (res.Err == nil) != c.ok {
			t.Errorf("claim %d on %s: %v; want ok=%v", i, c.r.device, res.Err, c.ok)
		}
	}
}

// A GPU the node's NVIDIA spec does not name cannot be prepared: the
// error says what to run.
func TestPrepareNeedsTheNodesNVIDIASpec(t *testing.T) {
	p := newTestPreparer(t, t.TempDir())
	inv := testInventory()
	inv.GPUs[0].UUID = "GPU-unnamed"
	p.Offer(inv, dradevices.Marks{})
	res := prepareOne(t, p, claimOn("uid-n", "n", nil, result{device: "gpu-unnamed", consumed: consumed("1Gi", "1")}))
	if res.Err == nil || !strings.Contains(res.Err.Error(), "GPU-unnamed") {
		t.Errorf("%v", res.Err)
	}
}

// A record that does not read stops the node role: forgetting what was
// prepared could hand a device out twice.
func TestPrepareRecordUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dra-n1.json")
	if err := os.WriteFile(path, []byte(`{"version":9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewPreparer("n1", path, dir, fakeEdits, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "move it aside") {
		t.Errorf("%v", err)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The hook's lookup: a claim's CDI device resolves to its grant for a
// pod it was prepared for; a pod that joined a claim held whole since is
// added once the claim, read again, is reserved for it; anything else is
// refused, and a name of another kind is none of the claims'.
func TestResolveByTheRecord(t *testing.T) {
	p := newTestPreparer(t, t.TempDir())
	inv := testInventory()
	inv.GPUs[1].Healthy = true // held whole below
	p.Offer(inv, dradevices.Marks{})
	whole := claimOn("c-2", "whole", []string{"pod-a"}, result{device: "gpu-b"})
	if res := prepareOne(t, p, whole); res.Err != nil {
		t.Fatal(res.Err)
	}
	ctx := context.Background()
	if g, ours, err := p.Resolve(ctx, ClaimKind+"=c-2-0", "pod-a", "app"); err != nil || !ours || g.UUID != "GPU-b" || g.Share {
		t.Errorf("pod-a: %+v %v %v", g, ours, err)
	}
	if _, ours, err := p.Resolve(ctx, "nvidia.com/gpu=0", "pod-a", "app"); ours || err != nil {
		t.Errorf("another kind: ours %v, %v", ours, err)
	}
	for _, n := range []string{ClaimKind + "=c-9-0", ClaimKind + "=c-2-5", ClaimKind + "=nodash"} {
		if _, ours, err := p.Resolve(ctx, n, "pod-a", "app"); !ours || err == nil {
			t.Errorf("%s: ours %v, %v; want refused", n, ours, err)
		}
	}
	reread := whole.DeepCopy()
	reread.Status.ReservedFor = append(reread.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p-b", UID: "pod-b"})
	p.getClaim = func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return reread, nil }
	if _, _, err := p.Resolve(ctx, ClaimKind+"=c-2-0", "pod-b", "app"); err != nil {
		t.Errorf("pod-b joining a GPU held whole: %v", err)
	}
	if got, _ := p.Claim("c-2"); strings.Join(got.Pods, ",") != "pod-a,pod-b" {
		t.Errorf("pods %v", got.Pods)
	}
	if _, _, err := p.Resolve(ctx, ClaimKind+"=c-2-0", "pod-c", "app"); err == nil || !strings.Contains(err.Error(), "not reserved for pod pod-c") {
		t.Errorf("pod-c: %v", err)
	}
}

// A share of a GPU serves every container of the pods its claim is
// reserved for, which the node holds to it together: a pod that joins
// is added once the claim, read again, is reserved for it, and pods
// that ended leave the record; any other pod is refused, across a
// re-prepare and a restart alike.
func TestAShareServesItsClaimsPods(t *testing.T) {
	dir := t.TempDir()
	p := newTestPreparer(t, dir)
	c := claimOn("c-1", "share", []string{"pod-a"}, result{device: "gpu-a", shareID: "s", consumed: consumed("8Gi", "20")})
	if res := prepareOne(t, p, c); res.Err != nil {
		t.Fatal(res.Err)
	}
	ctx := context.Background()
	name := ClaimKind + "=c-1-0"
	reserved := func(pods ...string) {
		r := c.DeepCopy()
		r.Status.ReservedFor = nil
		for _, pod := range pods {
			r.Status.ReservedFor = append(r.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p-" + pod, UID: types.UID(pod)})
		}
		p.getClaim = func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return r, nil }
	}
	reserved("pod-a", "pod-b")
	for _, step := range []struct {
		pod, container string
		want           string // "" for granted
	}{
		{"pod-a", "app", ""},
		{"pod-a", "helper", ""},
		{"pod-b", "app", ""},
		{"pod-c", "app", "not reserved for pod pod-c"},
	} {
		g, _, err := p.Resolve(ctx, name, step.pod, step.container)
		if (step.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), step.want)) {
			t.Errorf("%s/%s: %v; want %q", step.pod, step.container, err, step.want)
		}
		if err == nil && (!g.Share || g.MemoryMiB != 8192 || g.Cores != 20) {
			t.Errorf("%s/%s: %+v; want the claim's share of 8192 MiB and 20 cores", step.pod, step.container, g)
		}
	}
	if got, _ := p.Claim("c-1"); strings.Join(got.Pods, ",") != "pod-a,pod-b" {
		t.Errorf("pods %v; want pod-a,pod-b", got.Pods)
	}
	// kubelet restarts and asks again; the node role restarts: the pods
	// stay as the claim names them.
	if res := prepareOne(t, p, c); res.Err != nil {
		t.Fatal(res.Err)
	}
	again := newTestPreparer(t, dir)
	if _, _, err := again.Resolve(ctx, name, "pod-c", "app"); err == nil {
		t.Error("after a re-prepare and a restart, a pod the claim is not reserved for got the share")
	}
	// pod-a ended; pod-d joins, and the record drops pod-a.
	reserved("pod-b", "pod-d")
	if _, _, err := p.Resolve(ctx, name, "pod-d", "app"); err != nil {
		t.Errorf("pod-d joining: %v", err)
	}
	if got, _ := p.Claim("c-1"); strings.Join(got.Pods, ",") != "pod-d" {
		t.Errorf("after pod-d joined: pods %v; want pod-d (pod-a ended; the re-prepare named pod-a alone)", got.Pods)
	}
	// Two join at once: pod-y is added while pod-z's read, which
	// predates pod-y's reservation, is under way. pod-y stays.
	reserved("pod-d", "pod-z")
	read := p.getClaim
	p.getClaim = func(ctx context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
		p.mu.Lock()
		next := *p.claims["c-1"]
		next.Pods = append(slices.Clone(next.Pods), "pod-y")
		p.claims["c-1"] = &next
		p.mu.Unlock()
		return read(ctx, ns, name)
	}
	if _, _, err := p.Resolve(ctx, name, "pod-z", "app"); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Claim("c-1"); strings.Join(got.Pods, ",") != "pod-d,pod-y,pod-z" {
		t.Errorf("after two joined at once: pods %v; want pod-d,pod-y,pod-z", got.Pods)
	}
}

// A claim may tolerate vgpud's taints, and kube-scheduler then allocates
// it a GPU the extender's pods hold, or one cordoned or unhealthy: the
// node prepares no new claim there, and keeps one it prepared before.
func TestPrepareRefusesTaintedGPUs(t *testing.T) {
	p := newTestPreparer(t, t.TempDir())
	before := claimOn("uid-b", "before", []string{"pod-a"}, result{device: "gpu-a", shareID: "s1", consumed: consumed("1Gi", "10")})
	if res := prepareOne(t, p, before); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, c := range []struct {
		marks dradevices.Marks
		want  string
	}{
		{dradevices.Marks{Booked: map[string]bool{"GPU-a": true}}, "held by pods the extender placed"},
		{dradevices.Marks{Cordoned: map[string]bool{"GPU-a": true}}, "cordoned"},
	} {
		p.Offer(testInventory(), c.marks)
		res := prepareOne(t, p, claimOn("uid-t", "tolerates", []string{"pod-b"}, result{device: "gpu-a", shareID: "s2", consumed: consumed("1Gi", "10")}))
		if res.Err == nil || !strings.Contains(res.Err.Error(), c.want) {
			t.Errorf("a new claim on a GPU %s: %v", c.want, res.Err)
		}
		if res := prepareOne(t, p, before); res.Err != nil {
			t.Errorf("the claim prepared before, asked again (%s): %v", c.want, res.Err)
		}
	}
	p.Offer(testInventory(), dradevices.Marks{})
	if res := prepareOne(t, p, claimOn("uid-u", "sick", []string{"pod-c"}, result{device: "gpu-b", shareID: "s3", consumed: consumed("1Gi", "10")})); res.Err == nil || !strings.Contains(res.Err.Error(), "unhealthy") {
		t.Errorf("a new claim on the unhealthy GPU: %v", res.Err)
	}
}

// A node moved back to the device plugin keeps the claims it prepared:
// kubelet's asking again gets the same devices, the runtime hook still
// resolves them for their pods, and kubelet unprepares them as their
// pods end; a new claim is refused.
func TestKeepOnlyAnswersForWhatWasPrepared(t *testing.T) {
	dir := t.TempDir()
	c := claimOn("c-1", "share", []string{"pod-a"}, result{device: "gpu-a", consumed: consumed("8Gi", "20")})
	if res := prepareOne(t, newTestPreparer(t, dir), c); res.Err != nil {
		t.Fatal(res.Err)
	}
	p, err := NewPreparer("n1", filepath.Join(dir, "dra-n1.json"), dir, fakeEdits, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p.KeepOnly() // and nothing offered
	if res := prepareOne(t, p, c); res.Err != nil || len(res.Devices) != 1 || res.Devices[0].CDIDeviceIDs[0] != ClaimKind+"=c-1-0" {
		t.Errorf("asked again: %+v", res)
	}
	if g, _, err := p.Resolve(context.Background(), ClaimKind+"=c-1-0", "pod-a", "app"); err != nil || g.MemoryMiB != 8192 {
		t.Errorf("resolve: %+v, %v", g, err)
	}
	if res := prepareOne(t, p, claimOn("c-2", "new", []string{"pod-b"}, result{device: "gpu-a", consumed: consumed("1Gi", "1")})); res.Err == nil || !strings.Contains(res.Err.Error(), "no longer serves DRA claims") {
		t.Errorf("a new claim: %v", res.Err)
	}
	// Nor does a new pod join a kept claim: that would keep it, and the
	// node's fence, for good.
	r := c.DeepCopy()
	r.Status.ReservedFor = append(r.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p-b", UID: "pod-b"})
	p.getClaim = func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return r, nil }
	if _, _, err := p.Resolve(context.Background(), ClaimKind+"=c-1-0", "pod-b", "app"); err == nil || !strings.Contains(err.Error(), "no longer serves claims") {
		t.Errorf("a new pod of a kept claim: %v", err)
	}
	out, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "c-1"}})
	if err != nil || out["c-1"] != nil || len(p.Claims()) != 0 {
		t.Errorf("unprepare: %v %v, %d left", out, err, len(p.Claims()))
	}
}
