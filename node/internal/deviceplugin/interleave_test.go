package deviceplugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// TestInterleavedBinds plays the leader and kubelet against one node: pods
// are bound one after another, each as soon as the previous one's phase
// reached the API, while this replica's informer shows binds and its own
// phase writes late (0-40 ms). kubelet sometimes ignores the preferred
// devices. Every container must get exactly its own pod's GPUs and limits.
func TestInterleavedBinds(t *testing.T) {
	g := testGPUs(8)
	rng := rand.New(rand.NewPCG(7, 7))
	pods := newFakePods()
	phases := newFakePhases(pods, 20*time.Millisecond)
	p := New(Params{Node: "n1", Resources: wellknown.DefaultResourceNames(), Split: 10, ResolveWait: 5 * time.Second}, g, pods, phases, nil, clock.RealClock{}, quietLog())

	const n = 40
	for i := range n {
		pod := randomPod(rng, fmt.Sprintf("p%02d", i), g)
		// kubelet sees the bind now; this replica's informer a little later.
		time.AfterFunc(time.Duration(rng.IntN(40))*time.Millisecond, func() { pods.put(pod) })
		a, _ := protocol.DecodeAssignment(pod.Annotations[wellknown.AnnotationAssignment])
		for _, c := range gpuContainers(pod, a) {
			ca, _ := a.Container(c.Name)
			devIDs := kubeletPick(t, p, rng, assignedGPUs(a), len(ca.GPUs))
			r, err := allocate(p, devIDs)
			if err != nil {
				t.Fatalf("%s/%s: %v", pod.Name, c.Name, err)
			}
			checkEnv(t, pod.Name, ca, r.Envs)
		}
		// The leader binds the next pod only once this one is allocated.
		if got := phases.phases("default/" + pod.Name); len(got) != 1 || got[0] != protocol.PhaseAllocated {
			t.Fatalf("%s: phases %v, want [allocated]", pod.Name, got)
		}
	}
}

// kubeletPick asks for preferred devices and, one time in three, picks
// other slices of the pod's GPUs instead, as kubelet does when it hands an
// app container the devices an init container released.
func kubeletPick(t *testing.T, p *Plugin, rng *rand.Rand, podGPUs []string, size int) []string {
	devs, _ := p.Devices()
	avail := make([]string, len(devs))
	for i, d := range devs {
		avail[i] = d.ID
	}
	resp, err := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: int32(size)}}})
	if err != nil {
		t.Fatal(err)
	}
	if rng.IntN(3) > 0 {
		return resp.ContainerResponses[0].DeviceIDs
	}
	out := make([]string, size)
	for i, k := range rng.Perm(len(podGPUs))[:size] {
		out[i] = deviceID(podGPUs[k], rng.IntN(10))
	}
	return out
}

func checkEnv(t *testing.T, pod string, ca protocol.ContainerAssignment, env map[string]string) {
	t.Helper()
	uuids := make([]string, len(ca.GPUs))
	for i, s := range ca.GPUs {
		uuids[i] = s.UUID
		if got, want := env["CUDA_DEVICE_MEMORY_LIMIT_"+strconv.Itoa(i)], fmt.Sprintf("%dm", s.MemoryMiB); got != want {
			t.Errorf("%s/%s: memory limit %d = %s, want %s", pod, ca.Name, i, got, want)
		}
	}
	if got := env["NVIDIA_VISIBLE_DEVICES"]; got != strings.Join(uuids, ",") {
		t.Errorf("%s/%s: NVIDIA_VISIBLE_DEVICES=%s, want %s", pod, ca.Name, got, strings.Join(uuids, ","))
	}
	if got := env["CUDA_DEVICE_SM_LIMIT"]; got != strconv.Itoa(ca.GPUs[0].Cores) {
		t.Errorf("%s/%s: SM limit %s, want %d", pod, ca.Name, got, ca.GPUs[0].Cores)
	}
	if _, extra := env["CUDA_DEVICE_MEMORY_LIMIT_"+strconv.Itoa(len(ca.GPUs))]; extra {
		t.Errorf("%s/%s: more memory limits than GPUs: %v", pod, ca.Name, env)
	}
}

// randomPod has 0-1 init and 1-2 app GPU containers of 1-3 distinct GPUs,
// every container with its own memory, unique across pods.
func randomPod(rng *rand.Rand, name string, g []AdvertisedGPU) *corev1.Pod {
	sets := func(k int) [][]string {
		var out [][]string
		for range k {
			var set []string
			for _, i := range rng.Perm(len(g))[:1+rng.IntN(3)] {
				set = append(set, g[i].UUID)
			}
			out = append(out, set)
		}
		return out
	}
	init, app := sets(rng.IntN(2)), sets(1+rng.IntN(2))
	mem := make([]int64, len(init)+len(app))
	for i := range mem {
		mem[i] = 1000 + rng.Int64N(30000)
	}
	return boundPod(name, "n1", init, app, mem)
}
