//go:build bench

package bench

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/scripts/harness"
)

// HAMi v2.10's numbers on the caller's-view workload, as issue #54
// recorded them: the same client, workload and 2-core machine, a same-run
// side by side on 2026-11-29 (HAMi's scheduler extender against one
// kube-apiserver with 1000 nodes of 8 GPUs, split 10).
const hamiCallerView = "HAMi v2.10 on the same workload (issue #54's same-run side by side, 2026-11-29): filter p50 / p90 / p99 72.6 / 111.6 / 169.7 ms, 9.3 pods/s, 124.6 ms CPU per pod"

// callerPods is the caller's-view workload's size: 2000 pods, two per node.
const callerPods = 2000

// callerView drives the leader as kube-scheduler would with vgpud as its
// only extender, from one client: for each of 2000 pending GPU pods, one
// /filter with all 1000 node names over mutual TLS with the scheduler's
// certificate, then /bind to the first node it returned. What it prints
// is what a caller sees (latencies, pods/s) and what the leader paid (CPU
// per pod, RSS at the start and end), beside HAMi's on the same workload.
// The pods are deleted after, so that the placed-pod rounds start from
// empty books.
func (e env) callerView(t *testing.T, c *http.Client) {
	ctx := context.Background()
	harness.EnsureNamespace(t, e.kube, "caller", nil)
	pods := make([]*corev1.Pod, callerPods)
	harness.Parallel(t, callerPods, 32, func(i int) error {
		p, err := e.kube.CoreV1().Pods("caller").Create(ctx, gpuPodSpec(fmt.Sprintf("c-%04d", i)), metav1.CreateOptions{})
		pods[i] = p
		return err
	})
	names := make([]string, nodes)
	for i := range names {
		names[i] = nodeName(i)
	}
	rssStart, _ := harness.Memory(e.leaderPID)
	var filter, bind []time.Duration
	prof := e.profile(t, "caller-view")
	cpu := harness.CPUTime(e.leaderPID)
	start := time.Now()
	for _, p := range pods {
		var fr struct {
			NodeNames []string
			Error     string
		}
		d, err := post(c, "filter", map[string]any{"Pod": p, "NodeNames": names}, &fr)
		if err != nil || fr.Error != "" || len(fr.NodeNames) == 0 {
			t.Fatalf("filter %s: %v %s (%d fit)", p.Name, err, fr.Error, len(fr.NodeNames))
		}
		filter = append(filter, d)
		var br struct{ Error string }
		if d, err = post(c, "bind", map[string]any{"PodName": p.Name, "PodNamespace": p.Namespace, "PodUID": p.UID, "Node": fr.NodeNames[0]}, &br); err != nil || br.Error != "" {
			t.Fatalf("bind %s: %v %s", p.Name, err, br.Error)
		}
		bind = append(bind, d)
	}
	took := time.Since(start)
	prof()
	perPod := float64((harness.CPUTime(e.leaderPID) - cpu).Microseconds()) / 1000 / callerPods
	rssEnd, _ := harness.Memory(e.leaderPID)
	f, b := sortDur(filter), sortDur(bind)
	const section = "caller's view"
	const what = "2000 pods on 1000 nodes of 8 GPUs (split 10), one client: /filter with 1000 names over mutual TLS, then /bind"
	e.record(t, section, what+": filter p50 / p90 / p99", fmt.Sprintf("%.2f / %.2f / %.2f ms", pct(f, 0.5), pct(f, 0.9), pct(f, 0.99)),
		"<= 0.7 / - / 1.5 ms (100x HAMi)", metIf(pct(f, 0.5) <= 0.7 && pct(f, 0.99) <= 1.5))
	e.record(t, section, what+": bind p50 / p99", fmt.Sprintf("%.2f / %.2f ms", pct(b, 0.5), pct(b, 0.99)), "-", "-")
	e.record(t, section, what+": pods per second", fmt.Sprintf("%.0f pods/s (%.1f s)", callerPods/took.Seconds(), took.Seconds()), "-", "-")
	e.record(t, section, what+": leader CPU per pod (filter + bind), from its process's CPU time over the run", fmt.Sprintf("%.2f ms", perPod), "<= 1.2 ms", metIf(perPod <= 1.2))
	e.record(t, section, what+": leader RSS at the start / end", fmt.Sprintf("%.0f / %.0f MiB", rssStart, rssEnd), "-", "-")
	e.record(t, section, hamiCallerView, "-", "-", "-")

	// No kubelet finishes a graceful delete here: grace 0.
	harness.Parallel(t, callerPods, 32, func(i int) error {
		return e.kube.CoreV1().Pods("caller").Delete(ctx, pods[i].Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	harness.Eventually(t, 2*time.Minute, "the leader's books emptied of the caller's pods", func() error {
		got, err := leaderMetric("vgpud_cache_pods")
		if err != nil {
			return err
		}
		if got > 0 {
			return fmt.Errorf("cache holds %.0f pods", got)
		}
		return nil
	})
}
