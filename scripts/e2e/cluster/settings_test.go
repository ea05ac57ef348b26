//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/scripts/harness"
)

// clusterSettings changes the default node policy in the vgpud
// ConfigMap, as a platform team would with kubectl edit or helm upgrade:
// the leader puts it in force with no vgpud pod restarted and no device
// plugin registering again, pods without a policy of their own are
// placed by it.
func clusterSettings(t *testing.T, e env, nodes []string) {
	if len(nodes) < 2 {
		t.Skipf("needs two nodes; the cluster has %d", len(nodes))
	}
	ctx := context.Background()
	ns := "e2e-settings"
	e.namespace(t, ns, nil)
	e.idleGPUs(t)
	// What must not change: each replica's pod, its restarts, and its
	// device plugin's registrations with kubelet.
	type replica struct {
		uid           types.UID
		restarts      int32
		registrations int
	}
	before := map[string]replica{}
	for _, n := range nodes {
		p, err := e.vgpudPod(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = replica{p.UID, p.Status.ContainerStatuses[0].RestartCount, e.inspect(t, n).Registration.Count}
	}
	set := func(file string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"data": map[string]string{"cluster-settings.yaml": file}})
		if _, err := e.kube.CoreV1().ConfigMaps(system).Patch(ctx, "vgpud", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := e.kube.CoreV1().ConfigMaps(system).Get(ctx, "vgpud", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := cm.Data["cluster-settings.yaml"]
	// Back as it was, whatever happens: the removal scenario, next, reinstalls
	// vgpud from it.
	t.Cleanup(func() { set(original) })
	// Every replica follows the file, so a leader that changed meanwhile
	// says it too.
	leaderSays := func(what string, since time.Time) {
		t.Helper()
		harness.Eventually(t, 180*time.Second, "the leader logs "+what, func() error {
			l, err := e.leader()
			if err != nil {
				return err
			}
			out, err := e.kubectl("-n", system, "logs", l.Name, "--since-time="+since.UTC().Format(time.RFC3339))
			if err != nil {
				return err
			}
			if !strings.Contains(out, what) {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}

	start := time.Now()
	set("version: v1\nnodePolicy: spread\n")
	leaderSays("cluster settings applied", start.Add(-time.Second))
	t.Logf("nodePolicy spread in force %v after the ConfigMap changed", time.Since(start).Round(time.Second))

	// The flags say binpack, which puts these on one node (the node policy scenario);
	// the file's spread puts one on each.
	on := map[string]int{}
	var names []string
	for i := range nodes {
		name := fmt.Sprintf("by-default-%d", i)
		names = append(names, name)
		on[e.placeOne(t, ns, name, nil)]++
	}
	t.Logf("%d pods with no policy of their own on %v", len(nodes), on)
	if len(on) != len(nodes) {
		t.Errorf("with nodePolicy spread from the ConfigMap, %d pods landed on %d of %d nodes: %v", len(nodes), len(on), len(nodes), on)
	}
	e.waitRunning(t, ns, names, 120*time.Second)

	// A value the flags' rules refuse is refused as the file changes:
	// TestWatchSettings shows it on kubelet's link swap. Not waited for
	// here, where each change costs kubelet's sync period.

	for _, n := range nodes {
		p, err := e.vgpudPod(n)
		if err != nil {
			t.Fatal(err)
		}
		now := replica{p.UID, p.Status.ContainerStatuses[0].RestartCount, e.inspect(t, n).Registration.Count}
		if now != before[n] {
			t.Errorf("node %s: vgpud pod, restarts, registrations %+v, before %+v", n, now, before[n])
		}
	}
	t.Log("no vgpud pod restarted and no device plugin registered again")
}
