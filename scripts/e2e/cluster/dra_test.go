//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// draClaims is #55's DRA mode on the real cluster: the first node serves
// claims (dra: true in its per-node overrides) and publishes its GPUs as
// ResourceSlices; the stock kube-scheduler books a tenant's claims (one
// shared by two pods, one from a template), kubelet prepares them, the
// real containerd injects the claim's CDI device, and the runtime hook
// hands each container its slice from the node's prepare record. The
// node role restarts in the middle: the claims' containers run on, a
// new claim is prepared after it, and a pod that joins the shared claim
// runs, held with the first to the claim's memory together. A GPU pod of the extender's pinned to the node finds no GPU
// resource there, and the tenant cannot write a claim's status. A pod
// written for vgpud, in a namespace labelled vgpud.io/gpu-claims=true,
// becomes a claim and runs there with its slice; a template the tenant
// forges in its place gets a later pod refused.
func draClaims(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	node := nodes[0] // the first node uses the host's CDI directories
	const ns = "e2e-dra"
	asTenantCtl := newTenant(t, e, ns)
	asTenant := e.impersonate(t, "system:serviceaccount:"+ns+":tenant", nil)
	n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil || len(inv.GPUs) == 0 {
		t.Fatalf("node %s: %v", node, err)
	}
	index := map[string]int{}
	for _, g := range inv.GPUs {
		index[g.UUID] = g.Index
	}
	fakeNVIDIASpec(t, inv)

	overrides := e.overrides(t)
	restore := e.setOverrides(t, strings.TrimRight(overrides, "\n")+"\n  - name: "+node+"\n    dra: true\n")
	movedBack := false
	t.Cleanup(func() {
		if !movedBack {
			restore()
			e.restartNodeRole(t, node)
		}
		// Back on the device plugin, the node withdraws what it
		// published: the scheduler must allocate nothing there.
		harness.Eventually(t, 30*time.Second, node+"'s DRA slices withdrawn", func() error {
			list, err := e.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + wellknown.DRADriver})
			if err != nil || len(list.Items) > 0 {
				return fmt.Errorf("%d slices left (%v)", len(list.Items), err)
			}
			return nil
		})
	})
	// A tenant's pod of the extender's runs on the node when it moves to
	// DRA: the GPU it holds is tainted for claims until it ends, so
	// mixing the two ways on one node books nothing twice.
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: new(int64),
		Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("1000")}}}}}}
	if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the extender's pod: %v", err)
	}
	e.waitRunning(t, ns, []string{"held"}, 90*time.Second)
	hp, err := e.kube.CoreV1().Pods(ns).Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ha, err := protocol.DecodeAssignment(hp.Annotations[wellknown.AnnotationAssignment])
	if err != nil || len(ha.Containers) != 1 || len(ha.Containers[0].GPUs) != 1 {
		t.Fatalf("the extender pod's assignment: %+v, %v", ha, err)
	}
	heldGPU := ha.Containers[0].GPUs[0].UUID

	took := e.restartDRA(t, node, len(inv.GPUs))
	t.Logf("%s serves claims: its slices published %v after its vgpud pod was deleted", node, took.Round(time.Millisecond))

	// A replica's token writes only its own node's slices, in the pool
	// named after it (vgpud-resource-slices): a compromised node offers
	// nothing on another, nor spends another's devices.
	if len(nodes) > 1 {
		other := nodes[1]
		for _, tc := range []struct{ bound, nodeName, pool string }{
			{other, node, node},  // another node's slice
			{other, other, node}, // its own node, another's pool
			{"", other, other},   // a token bound to no node
		} {
			var extra map[string][]string
			if tc.bound != "" {
				extra = map[string][]string{"authentication.kubernetes.io/node-name": {tc.bound}}
			}
			replica := e.impersonate(t, "system:serviceaccount:"+system+":"+e.name(""), extra)
			_, err := replica.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-"},
				Spec: resourceapi.ResourceSliceSpec{Driver: wellknown.DRADriver, NodeName: &tc.nodeName,
					Pool: resourceapi.ResourcePool{Name: tc.pool, ResourceSliceCount: 1}}}, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "resource-slices") {
				t.Fatalf("vgpud's identity bound to %q wrote a slice of node %s, pool %s: %v", tc.bound, tc.nodeName, tc.pool, err)
			}
			t.Logf("token bound to %q, slice of node %s in pool %s: refused", tc.bound, tc.nodeName, tc.pool)
		}
	}

	// The cordon reaches the devices as a taint, and goes with it.
	last := inv.GPUs[len(inv.GPUs)-1]
	taint := func(uuid, key string, want bool) {
		t.Helper()
		harness.Eventually(t, 30*time.Second, fmt.Sprintf("GPU %s's device tainted %s: %v", uuid, key, want), func() error {
			list, err := e.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
			if err != nil {
				return err
			}
			for _, sl := range list.Items {
				for _, d := range sl.Spec.Devices {
					if d.Attributes["uuid"].StringValue == nil || *d.Attributes["uuid"].StringValue != uuid {
						continue
					}
					if has := slices.ContainsFunc(d.Taints, func(tt resourceapi.DeviceTaint) bool { return tt.Key == key }); has != want {
						return fmt.Errorf("taints %v", d.Taints)
					}
					return nil
				}
			}
			return fmt.Errorf("no device for %s", uuid)
		})
	}
	annotate := func(v string) {
		t.Helper()
		if out, err := e.kubectl("annotate", "--overwrite", "node", node, wellknown.AnnotationCordon+v); err != nil {
			t.Fatalf("cordon: %v: %s", err, out)
		}
	}
	annotate(fmt.Sprintf("=%d", last.Index))
	taint(last.UUID, dradevices.TaintCordoned, true)
	annotate("-")
	taint(last.UUID, dradevices.TaintCordoned, false)
	taint(heldGPU, dradevices.TaintExtenderBooked, true)
	t.Logf("GPU %s, held by the extender's pod, is tainted extender-booked", heldGPU)

	class := e.name("-gpu")
	capacity := func(mem, cores string) *resourceapi.CapacityRequirements {
		c := &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(mem)}}
		if cores != "" {
			c.Requests["cores"] = resource.MustParse(cores)
		}
		return c
	}
	request := func(mem, cores string) resourceapi.DeviceClaim {
		return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Capacity: capacity(mem, cores)}}}}
	}
	if _, err := asTenant.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: resourceapi.ResourceClaimSpec{Devices: request("4Gi", "30")}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant's claim: %v", err)
	}
	if _, err := asTenant.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "small"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: request("2Gi", "")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant's claim template: %v", err)
	}
	pod := func(name string, claim corev1.PodResourceClaim) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: new(int64),
			ResourceClaims: []corev1.PodResourceClaim{claim},
			Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1",
				Command:   []string{"sh", "-c", "echo DEVICES=$(ls /dev | grep nvidia | sort | tr '\\n' ' '); env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_DEVICE_)' | sort; sleep 3600"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim.Name}}}}},
		}}
	}
	shared := corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: new("shared")}
	small := corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: new("small")}
	start := time.Now()
	for name, c := range map[string]corev1.PodResourceClaim{"a": shared, "t": small} {
		if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, pod(name, c), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	e.waitRunning(t, ns, []string{"a", "t"}, 90*time.Second)
	t.Logf("two claim pods Running in %v", time.Since(start).Round(time.Millisecond))
	check := func(name, mem, cores string) string {
		t.Helper()
		env := e.containerEnv(t, ns, name)
		uuid := env["NVIDIA_VISIBLE_DEVICES"]
		i, ok := index[uuid]
		want := fmt.Sprintf("nvidia%d nvidiactl", i)
		if !ok || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != mem || env["CUDA_DEVICE_SM_LIMIT"] != cores || env["DEVICES"] != want {
			t.Errorf("%s: env %v; want one of the node's GPUs with %s, %s cores, devices %q", name, env, mem, cores, want)
		}
		t.Logf("%s sees %s (GPU %d), memory limit %s, SM limit %s, devices %s", name, uuid, i, env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"], env["DEVICES"])
		return uuid
	}
	gpu := check("a", "4096m", "30")
	// The template's claim names no cores: the split's share (100/10).
	check("t", "2048m", "10")
	if gpu == heldGPU {
		t.Errorf("a's claim was allocated GPU %s, which the extender's pod holds", gpu)
	}

	// A claim aimed at the extender pod's GPU waits while the pod runs,
	// and is placed there once it has ended.
	aimed := request("1Gi", "")
	aimed.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes[%q].uuid == %q", wellknown.DRADriver, heldGPU)}}}
	if _, err := asTenant.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "aimed"},
		Spec: resourceapi.ResourceClaimSpec{Devices: aimed}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, pod("aimed", corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: new("aimed")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("aimed: %s", e.refused(t, ns, "aimed", "the claim aimed at the extender pod's GPU"))
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	taint(heldGPU, dradevices.TaintExtenderBooked, false)
	e.waitRunning(t, ns, []string{"aimed"}, 90*time.Second)
	t.Logf("the extender's pod deleted: the taint is gone, and the aimed claim runs on GPU %s", heldGPU)
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "aimed", metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, "the aimed pod gone and its claim unprepared", func() error {
		if _, err := e.kube.CoreV1().Pods(ns).Get(ctx, "aimed", metav1.GetOptions{}); err == nil {
			return errors.New("still there")
		}
		for _, c := range e.inspect(t, node).Claims {
			if c.Claim == "aimed" {
				return errors.New("still prepared")
			}
		}
		return nil
	})

	// The node holds a claim's container to its slice as it holds an
	// extender's (the default, auto, enforces where the hook runs): t's
	// process, declared on the mock GPU past its 2048 MiB and the 1024
	// MiB margin, is killed; a's, within its 4096 MiB, is not.
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	within, over := e.containerPID(t, ns, "a"), e.containerPID(t, ns, "t")
	e.declareProcess(t, vp, gpu, within, 3000, 10)
	e.declareProcess(t, vp, gpu, over, 3600, 10)
	gone := killedWithin(over)
	if gone == 0 || gone > 2*time.Second {
		t.Errorf("t's process %d, 3600 MiB on a 2048 MiB claim: gone after %v; want within 2 s", over, gone)
	}
	if err := syscall.Kill(within, 0); err != nil {
		t.Errorf("a's process %d, within its claim, is gone: %v", within, err)
	}
	t.Logf("t's process (3600 MiB on a 2048 MiB claim, margin 1024 MiB) killed %v after it was declared; a's (3000 of 4096 MiB) runs", gone.Round(time.Millisecond))

	// The node role restarts; the record keeps what it prepared, and the
	// claims' containers run on, not restarted (a's; t's restarts as its
	// first process was killed). A pod that joins the
	// shared claim runs with its share: the node holds a's and b's
	// processes to the claim's 4096 MiB together. A new pod from the
	// template is prepared and runs.
	restarts := func() int32 {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("pod a: %v", err)
		}
		return p.Status.ContainerStatuses[0].RestartCount
	}
	before := restarts()
	e.restartDRA(t, node, len(inv.GPUs))
	for name, c := range map[string]corev1.PodResourceClaim{"b": shared, "u": small} {
		if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, pod(name, c), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	e.waitRunning(t, ns, []string{"a", "b", "t", "u"}, 90*time.Second)
	e.measuredAsClaim(t, node, ns, "a", ns+"/shared")
	if after := restarts(); after != before {
		t.Errorf("a's container restarted across the node role's restart: %d, then %d times; want none", before, after)
	}
	check("u", "2048m", "10")
	if got := check("b", "4096m", "30"); got != gpu {
		t.Errorf("b, joining a's claim, sees GPU %s; want a's %s", got, gpu)
	}
	// b's process of 3600 MiB is within the claim's 4096 on its own, but
	// with a's 3000 the pool holds 6600, past 4096 and the 1024 MiB
	// margin: b's, the largest, is killed; a's runs.
	if vp, err = e.vgpudPod(node); err != nil {
		t.Fatal(err)
	}
	joined := e.containerPID(t, ns, "b")
	e.declareProcess(t, vp, gpu, joined, 3600, 10)
	gone = killedWithin(joined)
	if gone == 0 || gone > 2*time.Second {
		t.Errorf("b's process %d, 3600 MiB beside a's 3000 on their 4096 MiB claim: gone after %v; want within 2 s", joined, gone)
	}
	if err := syscall.Kill(within, 0); err != nil {
		t.Errorf("a's process %d, the smaller in the pool, is gone: %v", within, err)
	}
	t.Logf("b's process (3600 MiB, with a's 3000 on their 4096 MiB claim) killed %v after it was declared; a's runs", gone.Round(time.Millisecond))
	harness.Eventually(t, 30*time.Second, "b's Event names the claim", func() error {
		return e.eventSays(ns, "b", "claim "+ns+"/shared's share (2 in all) held 6600 MiB together", "this container's")
	})
	// vgpud inspect shows the claims from the node's record and counts
	// them on their GPUs.
	snap := e.inspect(t, node)
	var rows []string
	for _, c := range snap.Claims {
		rows = append(rows, fmt.Sprintf("%s:%s:%d:%d", c.Claim, strings.Join(c.Pods, "+"), c.MemoryMiB, c.Cores))
	}
	if !snap.DRA || !slices.Contains(rows, "shared:a+b:4096:30") || len(rows) != 3 {
		t.Errorf("vgpud inspect: DRA %v, claims %v; want shared:a+b:4096:30 and the two template claims", snap.DRA, rows)
	}
	for _, g := range snap.GPUs {
		if g.UUID == gpu && (g.MemoryUsedMiB < 4096 || g.SlicesUsed < 1) {
			t.Errorf("vgpud inspect: GPU %s holds %d MiB in %d slices; want the shared claim's 4096 counted", gpu, g.MemoryUsedMiB, g.SlicesUsed)
		}
	}
	t.Logf("vgpud inspect on %s: claims %v", node, rows)

	// The books are the scheduler's: a tenant cannot write them.
	if out, err := asTenantCtl("", "patch", "resourceclaim", "shared", "--subresource=status", "--type=merge", "-p", `{"status":{"reservedFor":null}}`); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("the tenant wrote the claim's status: %v: %s", err, out)
	}
	// A status forged all the same (written here by the cluster's admin,
	// as one who may could, for a pod bound by hand) gets nothing the node
	// did not offer: a share of all of a's GPU's memory, beside the claims
	// already there, is refused at prepare, and its pod never starts.
	if _, err := asTenant.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "forged"},
		Spec: resourceapi.ResourceClaimSpec{Devices: request("1Gi", "1")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	forger := pod("forger", corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: new("forged")})
	forger.Spec.NodeSelector, forger.Spec.NodeName = nil, node
	if forger, err = e.kube.CoreV1().Pods(ns).Create(ctx, forger, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpuMiB := inv.GPUs[index[gpu]].MemoryMiB
	fc, err := e.kube.ResourceV1().ResourceClaims(ns).Get(ctx, "forged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: forger.Name, UID: forger.UID}}
	fc.Status.Allocation = &resourceapi.AllocationResult{
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: wellknown.DRADriver, Pool: node, Device: dradevices.DeviceName(gpu),
			ShareID: new(types.UID("0b0c3f2e-6a1d-4c55-9a7e-3f1d2c4b5a60")), ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
				dradevices.CapacityMemory: *resource.NewQuantity(gpuMiB<<20, resource.BinarySI), dradevices.CapacityCores: resource.MustParse("1"), dradevices.CapacitySlots: resource.MustParse("1")}}}}}
	if _, err := e.kube.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, fc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("forge the claim's status as the admin: %v", err)
	}
	harness.Eventually(t, 60*time.Second, "the forged allocation refused at prepare", func() error {
		return e.eventSays(ns, "forger", "would hold", "with the claims already prepared here")
	})
	if p, err := e.kube.CoreV1().Pods(ns).Get(ctx, "forger", metav1.GetOptions{}); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("forger: %v, %v; want it not running", p.Status.Phase, err)
	}
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "forger", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := e.kube.ResourceV1().ResourceClaims(ns).Delete(ctx, "forged", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a forged status of %d MiB on GPU %s, beside the claims there: refused at prepare", gpuMiB, gpu)
	// An extender GPU pod pinned to the node finds no GPU resource there:
	// nothing is booked twice between the two ways.
	ext := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "extender"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: new(int64),
		Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("1000")}}}}}}
	if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, ext, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the extender's pod: %v", err)
	}
	t.Logf("extender pod: %s", e.refused(t, ns, "extender", "the extender's pod pinned to the DRA node"))

	// A pod written for vgpud or HAMi, in a namespace labelled
	// vgpud.io/gpu-claims=true: the webhook turns its vGPU resources
	// into a claim from a template of its shape, and it runs on the DRA
	// node with the slice it asked.
	const cns = "e2e-dra-convert"
	newTenant(t, e, cns)
	if _, err := e.kubectl("label", "--overwrite", "namespace", cns, wellknown.LabelGPUClaims+"=true"); err != nil {
		t.Fatal(err)
	}
	asConverted := e.impersonate(t, "system:serviceaccount:"+cns+":tenant", nil)
	// vGPU quota counts the namespace's pods and claims alike.
	if _, err := e.kube.CoreV1().ResourceQuotas(cns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("8000")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vgpuPod := func(name string) *corev1.Pod {
		p := pod(name, corev1.PodResourceClaim{})
		p.Spec.ResourceClaims = nil
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("1500"), "nvidia.com/gpucores": resource.MustParse("20")}}
		return p
	}
	start = time.Now()
	conv, err := asConverted.CoreV1().Pods(cns).Create(ctx, vgpuPod("converted"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a vGPU pod in %s: %v", cns, err)
	}
	if len(conv.Spec.ResourceClaims) != 1 || conv.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil || conv.Spec.SchedulerName != "default-scheduler" ||
		len(conv.Spec.Containers[0].Resources.Limits) != 0 {
		t.Fatalf("the pod as admitted: claims %+v, scheduler %s, limits %v; want one claim from a template, the default scheduler, no vGPU limits",
			conv.Spec.ResourceClaims, conv.Spec.SchedulerName, conv.Spec.Containers[0].Resources.Limits)
	}
	template := *conv.Spec.ResourceClaims[0].ResourceClaimTemplateName
	e.waitRunning(t, cns, []string{"converted"}, 90*time.Second)
	t.Logf("a pod of nvidia.com/gpumem 1500 and gpucores 20 became a claim from template %s, Running in %v", template, time.Since(start).Round(time.Millisecond))
	env := e.containerEnv(t, cns, "converted")
	if _, ok := index[env["NVIDIA_VISIBLE_DEVICES"]]; !ok || env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1500m" || env["CUDA_DEVICE_SM_LIMIT"] != "20" {
		t.Errorf("converted: env %v; want one of %s's GPUs with 1500m and 20 cores", env, node)
	}
	claims, err := e.kube.ResourceV1().ResourceClaims(cns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 || len(claims.Items[0].OwnerReferences) != 1 || claims.Items[0].OwnerReferences[0].UID != conv.UID {
		t.Fatalf("the converted pod's claims: %+v, %v; want one, owned by the pod", claims, err)
	}
	// A claim the tenant writes itself is charged as the pod's is: the
	// converted pod's claim, allocated, a slot's share of its GPU (4096
	// MiB of 40960 at split 10) as bind charges an extender pod, though
	// it asked 1500; the new one what it asks, 2048: 6144 of 8000. One of
	// 3 GiB more is refused.
	claimOf := func(name, mem string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimSpec{Devices: request(mem, "")}}
	}
	direct := claimOf("direct", "2Gi")
	if _, err := asConverted.ResourceV1().ResourceClaims(cns).Create(ctx, direct, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a claim of 2Gi within the quota: %v", err)
	}
	_, err = asConverted.ResourceV1().ResourceClaims(cns).Create(ctx, claimOf("too-much", "3Gi"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "gpumem quota 8000 MiB, in use 6144") {
		t.Errorf("a claim of 3Gi past the quota (4096 + 2048 of 8000 used): %v; want it refused", err)
	} else {
		t.Logf("quota: %.200s", err)
	}

	// Admin access to vgpud's GPUs is refused at create, even where
	// Kubernetes' own label allows it: the node would prepare none.
	// (In the namespace without a quota, which would refuse it first.)
	if _, err := e.kubectl("label", "--overwrite", "namespace", ns, "resource.kubernetes.io/admin-access=true"); err != nil {
		t.Fatal(err)
	}
	admin := claimOf("admin", "1Gi")
	admin.Spec.Devices.Requests[0].Exactly.AdminAccess = new(true)
	admin.Spec.Devices.Requests[0].Exactly.Capacity = nil
	if _, err := asTenant.ResourceV1().ResourceClaims(ns).Create(ctx, admin, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "prepares for no one") {
		t.Errorf("a claim of admin access to vgpud's GPUs: %v; want refused by vgpud-claims-admin-access", err)
	} else {
		t.Logf("admin access: %.160s", err)
	}

	// The cluster view shows the claims beside the extender's pods: each
	// share on its GPU's row, and the namespace charged for its claims.
	if vp, err = e.vgpudPod(node); err != nil { // restarted since
		t.Fatal(err)
	}
	out, err := e.kubectl("-n", system, "exec", vp.Name, "--", "vgpud", "inspect", "--cluster", "-o", "json", "--claim-device-class="+class)
	if err != nil {
		t.Fatalf("inspect --cluster: %v %s", err, out)
	}
	var view inspectv1.ClusterView
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("inspect --cluster -o json: %v: %.300s", err, out)
	}
	var shares []string
	for _, n := range view.Nodes {
		for _, g := range n.GPUs {
			if len(g.Claims) > 0 {
				shares = append(shares, fmt.Sprintf("%s/%d: %s (%d MiB, %d cores, %d slots used)", n.Name, g.Index, strings.Join(g.Claims, " "), g.MemoryUsedMiB, g.CoresUsed, g.SlotsUsed))
			}
		}
	}
	convertedClaim := claims.Items[0].Name
	charged := int64(-1)
	for _, ns := range view.Namespaces {
		if ns.Name == cns {
			charged = ns.MemoryUsedMiB
		}
	}
	if joined := strings.Join(shares, "; "); !strings.Contains(joined, ns+"/shared") || !strings.Contains(joined, cns+"/"+convertedClaim) || charged != 6144 {
		t.Errorf("inspect --cluster: GPUs with claims %v, %s charged %d; want %s/shared and %s/%s shown and 6144 MiB charged", shares, cns, charged, ns, cns, convertedClaim)
	}
	t.Logf("inspect --cluster: %s; %s charged %d MiB", strings.Join(shares, "; "), cns, charged)

	// The tenant replaces the template with one of the same name that
	// asks more: the next pod of that shape is refused, not given it.
	if out, err := e.kubectl("--as=system:serviceaccount:"+cns+":tenant", "-n", cns, "delete", "resourceclaimtemplate", template); err != nil {
		t.Fatalf("the tenant deletes the template: %v: %s", err, out)
	}
	forged := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: template},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: request("30Gi", "100")}}}
	if _, err := asConverted.ResourceV1().ResourceClaimTemplates(cns).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant's template: %v", err)
	}
	if _, err := asConverted.CoreV1().Pods(cns).Create(ctx, vgpuPod("forged"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "not the one vgpud makes") {
		t.Errorf("a pod of the shape whose template the tenant replaced: %v; want it refused", err)
	} else {
		t.Logf("after the tenant replaced template %s: %.160s", template, err)
	}

	// The node moves back to the device plugin with the claims' pods
	// running. It keeps answering for the claims it prepared: a's
	// container runs on, not restarted. The leader's books keep the
	// extender off what the claims hold: a pod asking all of a's GPU,
	// aimed at it by UUID, waits while the claims hold it, and is placed
	// there once their pods are gone.
	if err := e.kube.CoreV1().Pods(ns).Delete(ctx, "extender", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	before = restarts()
	restore()
	movedBack = true
	e.restartNodeRole(t, node)
	if snap := e.inspect(t, node); snap.DRA || len(snap.Claims) != 4 {
		t.Errorf("vgpud inspect after the move back: DRA %v, claims kept %+v; want the device plugin, and the four claims kept", snap.DRA, snap.Claims)
	}
	e.measuredAsClaim(t, node, ns, "a", ns+"/shared")
	if err := syscall.Kill(within, 0); err != nil {
		t.Errorf("a's process %d is gone after the move back: %v", within, err)
	}
	if after := restarts(); after != before {
		t.Errorf("a's container restarted as the node moved back to the device plugin: %d, then %d times; want none", before, after)
	}
	whole := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "whole", Annotations: map[string]string{wellknown.AnnotationUseGPUUUID: gpu}}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"kubernetes.io/hostname": node}, TerminationGracePeriodSeconds: new(int64),
		Containers: []corev1.Container{{Name: "main", Image: "vgpud.local/busybox:1", Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpucores": resource.MustParse("100")}}}}}}
	if _, err := asTenant.CoreV1().Pods(ns).Create(ctx, whole, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the extender's pod of all of GPU %s: %v", gpu, err)
	}
	if why := e.refused(t, ns, "whole", "the extender's pod of all of the claims' GPU"); !strings.Contains(why, "not idle") {
		t.Errorf("whole refused: %s; want the extender's reason, its GPU not idle", why)
	} else {
		t.Logf("whole: %s", why)
	}
	for _, name := range []string{"a", "b", "t"} {
		if err := e.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitRunning(t, ns, []string{"whole"}, 90*time.Second)
	if wp, err := e.kube.CoreV1().Pods(ns).Get(ctx, "whole", metav1.GetOptions{}); err != nil || !strings.Contains(wp.Annotations[wellknown.AnnotationAssignment], gpu) {
		t.Errorf("whole runs, assigned %v (%v); want GPU %s", wp.Annotations[wellknown.AnnotationAssignment], err, gpu)
	}
	t.Logf("after the move back, the extender's pod of all of GPU %s waited for the claims there, and runs once their pods are gone", gpu)

	// Gone while the node still answers for the claims, so that kubelet
	// has the node unprepare them (a pod deleted by force never is).
	grace := int64(1)
	for _, n := range []string{ns, cns} {
		if err := e.kube.CoreV1().Pods(n).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 60*time.Second, "the claim pods gone and their claims unprepared", func() error {
		pods, err := e.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		left := 0
		for _, p := range pods.Items {
			if p.Namespace == ns || p.Namespace == cns {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d pods left", left)
		}
		if s := e.inspect(t, node); len(s.Claims) > 0 {
			return fmt.Errorf("%d claims still prepared", len(s.Claims))
		}
		return nil
	})
}

// killedWithin is how long after now the process pid, just declared
// over its slice, is gone; 0 if it is still there 10 s on.
func killedWithin(pid int) time.Duration {
	declared := time.Now()
	for time.Since(declared) < 10*time.Second {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return time.Since(declared)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// measuredAsClaim waits until node's GPU usage measures pod's
// container as a holder of claim's share: the runtime hook granted it
// from the node's record, and the node holds it to the share.
func (e env) measuredAsClaim(t *testing.T, node, ns, pod, claim string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, pod+" measured as a holder of "+claim, func() error {
		s := e.inspect(t, node)
		if s.Use == nil {
			return errors.New("no usage sample yet")
		}
		for _, c := range s.Use.Containers {
			if c.Namespace == ns && c.Pod == pod && c.Claim == claim {
				return nil
			}
		}
		return fmt.Errorf("usage rows %+v", s.Use.Containers)
	})
}

// restartDRA deletes node's vgpud pod and waits for the new one to be
// ready, with the node's GPUs published as its driver's devices.
func (e env) restartDRA(t *testing.T, node string, gpus int) time.Duration {
	t.Helper()
	ctx := context.Background()
	vp, err := e.vgpudPod(node)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kube.CoreV1().Pods(system).Delete(ctx, vp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return harness.Eventually(t, 120*time.Second, "the node role serving claims on "+node, func() error {
		np, err := e.vgpudPod(node)
		if err != nil || np.UID == vp.UID || !podReady(np) {
			return fmt.Errorf("the new node role is not ready (%v)", err)
		}
		slices, err := e.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		devices := 0
		for _, s := range slices.Items {
			if s.Spec.Driver == wellknown.DRADriver {
				devices += len(s.Spec.Devices)
			}
		}
		if devices != gpus {
			return fmt.Errorf("%d devices published; want %d", devices, gpus)
		}
		return nil
	})
}

// refused waits until kube-scheduler finds pod ns/name unschedulable,
// and returns why; what is placed instead fails the test.
func (e env) refused(t *testing.T, ns, name, what string) string {
	t.Helper()
	var why string
	harness.Eventually(t, 60*time.Second, what+" refused", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("%s was placed on %s", what, p.Spec.NodeName)
		}
		var ok bool
		if why, ok = harness.Unschedulable(p); ok {
			return nil
		}
		return errors.New("not refused yet")
	})
	return why
}
