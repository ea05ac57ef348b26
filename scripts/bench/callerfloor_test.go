//go:build bench

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/scripts/harness"
)

// floorListen is where the leader floor answers as an extender.
const floorListen = "127.0.0.1:9445"

// callerFloor drives the caller's-view loop against the leader floor
// (scripts/bench/leaderfloor --extender-listen): the same watches, the
// same mutual TLS and bodies, each call decoded with encoding/json, the
// first candidate taken and bound with one plain Binding. Its CPU per pod
// is what this machine charges any Go extender for a filter and a bind,
// the part of the leader's CPU row no change to vgpud can take away: a
// machine whose syscalls trap to a host (these are PVM guests) pays two
// to three times more for it than the 17th session's did. Without
// VGPUD_LEADER_FLOOR it does nothing.
func (e env) callerFloor(t *testing.T, c *http.Client) {
	bin := os.Getenv("VGPUD_LEADER_FLOOR")
	if bin == "" {
		return
	}
	ctx := context.Background()
	floor := harness.Spawn(t, "leaderfloor-extender", bin, "--kubeconfig="+e.kubeconfig, "--extender-listen="+floorListen)
	defer floor.Stop(t)
	harness.EnsureNamespace(t, e.kube, "floor", nil)
	pods := make([]*corev1.Pod, callerPods)
	harness.Parallel(t, callerPods, 32, func(i int) error {
		spec := gpuPodSpec(fmt.Sprintf("f-%04d", i))
		// Of no scheduler vgpud books for: its leader ignores them.
		spec.Spec.SchedulerName = "floor-scheduler"
		p, err := e.kube.CoreV1().Pods("floor").Create(ctx, spec, metav1.CreateOptions{})
		pods[i] = p
		return err
	})
	names := allNodeNames()
	harness.Eventually(t, 2*time.Minute, "the leader floor synced and answering", func() error {
		b, err := os.ReadFile(floor.Log)
		if err != nil || !strings.Contains(string(b), "synced") {
			return fmt.Errorf("not synced yet: %v %s", err, b)
		}
		var fr struct{ NodeNames []string }
		_, err = postTo(c, floorListen, "filter", map[string]any{"Pod": pods[0], "NodeNames": names}, &fr)
		return err
	})
	pid := floor.Cmd.Process.Pid
	waitIdle(t, pid, "the leader floor", 60*time.Second, "after the creates")
	cpu := harness.CPUTime(pid)
	k0, kernelErr := harness.ReadKernel(pid)
	filter, bind, took := callerLoop(t, c, floorListen, pods, names)
	perPod := float64((harness.CPUTime(pid) - cpu).Microseconds()) / 1000 / callerPods
	if k1, err := harness.ReadKernel(pid); err == nil && kernelErr == nil {
		logKernel(t, "leader floor over the caller's view", k1.Sub(k0), callerPods)
	}
	f, b := sortDur(filter), sortDur(bind)
	e.record(t, "caller's view", fmt.Sprintf("floor: the same loop against a program that only decodes each call, takes the first node and binds with one Binding, watching what the leader watches (scripts/bench/leaderfloor): filter p50 %.2f ms, bind p50 %.2f ms, %.0f pods/s; its CPU per pod", pct(f, 0.5), pct(b, 0.5), callerPods/took.Seconds()),
		fmt.Sprintf("%.2f ms", perPod), "-", "-")
	harness.Parallel(t, callerPods, 32, func(i int) error {
		return e.kube.CoreV1().Pods("floor").Delete(ctx, pods[i].Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}
