//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
)

// TestLeaderMemoryAtScale fills the apiserver with VGPUD_SCALE_NODES nodes
// (8 × 80 GB GPUs each) and VGPUD_SCALE_PODS pods holding GPUs, starts a
// leader, and reports its resident memory once its cache has synced.
// Skipped unless VGPUD_SCALE_NODES is set (it takes minutes): the bench
// issue runs it.
func TestLeaderMemoryAtScale(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("VGPUD_SCALE_NODES"))
	pods, _ := strconv.Atoi(os.Getenv("VGPUD_SCALE_PODS"))
	if nodes == 0 {
		t.Skip("set VGPUD_SCALE_NODES (and VGPUD_SCALE_PODS) to run")
	}
	e := setup(t)
	ctx := context.Background()
	e.ensureNamespace(t, "scale", nil)
	start := time.Now()
	parallel(t, nodes, func(i int) error {
		inv := protocol.Inventory{}
		for g := 0; g < 8; g++ {
			inv.GPUs = append(inv.GPUs, protocol.GPU{UUID: fmt.Sprintf("GPU-%05d-%d", i, g), Index: g, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Cores: 100, Split: 10, NUMA: g / 4, Healthy: true})
		}
		raw, _ := protocol.EncodeInventory(inv)
		n, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%05d", i), Annotations: map[string]string{protocol.AnnotationGPUs: raw}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("80")}
		n.Status.Capacity = n.Status.Allocatable
		_, err = e.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	parallel(t, pods, func(k int) error {
		n := k % nodes
		raw, _ := protocol.EncodeAssignment(protocol.Assignment{Node: fmt.Sprintf("scale-%05d", n), Containers: []protocol.ContainerAssignment{{Name: "c",
			GPUs: []protocol.GPUSlice{{UUID: fmt.Sprintf("GPU-%05d-%d", n, (k/nodes)%8), MemoryMiB: 4000, Cores: 10}}}}})
		_, err := e.kube.CoreV1().Pods("scale").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%05d", k), Annotations: map[string]string{protocol.AnnotationAssignment: raw, protocol.AnnotationPhase: "allocated"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		return err
	})
	t.Logf("created %d nodes and %d pods in %.0f s", nodes, pods, time.Since(start).Seconds())

	r := e.start(t, "vgpud-scale", listen)
	eventually(t, 120*time.Second, "leader ready (cache synced)", func() error {
		out, err := exec.Command("curl", "-sk", "https://"+listen+"/readyz").Output()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			return errorf("readyz %q %v", out, err)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "VmHWM:") {
			t.Logf("leader with %d nodes and %d pods: %s", nodes, pods, strings.Join(strings.Fields(l), " "))
		}
	}
}

// parallel runs f(0..n-1) on 16 workers and fails on the first error.
func parallel(t *testing.T, n int, f func(int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}
