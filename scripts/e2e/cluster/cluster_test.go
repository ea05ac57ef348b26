//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/protocol"
)

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestCluster runs the scenarios on one cluster, in this order to share
// it. Each brings up what it needs, vgpud installed (e.installed), and
// leaves the cluster as it found it, so that any one runs alone by its
// name on a cluster brought up for it (scripts/cluster.sh up):
// go test -tags e2e -run 'TestCluster/per-GPU_cordon$'.
func TestCluster(t *testing.T) {
	e := setup(t)

	t.Run("install with the chart", func(t *testing.T) { installWithChart(t, e) })

	// The chart's release gives way to the previous release's manifest,
	// which is then upgraded to this release's: the scenarios after run
	// on that install.
	t.Run("upgrade from the previous release", func(t *testing.T) { upgradeFromRelease(t, e, e.installed(t)) })
	t.Run("one pod end to end", func(t *testing.T) { onePodEndToEnd(t, e, e.installed(t)) })
	t.Run("a burst of GPU pods on one node", func(t *testing.T) { burstOnOneNode(t, e, e.installed(t)) })
	t.Run("unfittable pod", func(t *testing.T) { unfittablePod(t, e, e.installed(t)) })
	t.Run("kubelet restart", func(t *testing.T) { kubeletRestart(t, e, e.installed(t)) })
	t.Run("leader failover", func(t *testing.T) { leaderFailover(t, e, e.installed(t)) })
	t.Run("denials through kube-apiserver", func(t *testing.T) { denials(t, e, e.installed(t)) })
	t.Run("opt-out namespace", func(t *testing.T) { optOutNamespace(t, e, e.installed(t)) })
	t.Run("state survives restarting every vgpud pod", func(t *testing.T) { stateSurvivesRestart(t, e, e.installed(t)) })
	t.Run("tenant attacks", func(t *testing.T) { e.installed(t); tenantAttacks(t, e) })
	t.Run("runtime identity", func(t *testing.T) { runtimeIdentity(t, e, e.installed(t)) })
	t.Run("fences", func(t *testing.T) { fences(t, e, e.installed(t)) })
	t.Run("node labels and placement without GPU feature discovery", func(t *testing.T) { nodeLabels(t, e, e.installed(t)) })
	t.Run("GPU agents exempt only where an admin said", func(t *testing.T) { gpuAgents(t, e, e.installed(t)) })
	t.Run("a GPU by another way is refused", func(t *testing.T) { sideDoor(t, e, e.installed(t)) })
	t.Run("GPUs handed out as CDI devices", func(t *testing.T) { cdiDevices(t, e, e.installed(t)) })
	t.Run("DRA claims on a node that serves them", func(t *testing.T) { draClaims(t, e, e.installed(t)) })
	t.Run("GPU pods admitted with no GPU node", func(t *testing.T) { noGPUNode(t, e, e.installed(t)) })
	t.Run("per-GPU cordon", func(t *testing.T) { gpuCordon(t, e, e.installed(t)) })
	t.Run("mutex holds its GPU both ways", func(t *testing.T) { gpuMutex(t, e, e.installed(t)) })
	t.Run("topology-aware multi-GPU placement", func(t *testing.T) { gpuTopology(t, e, e.installed(t)) })
	t.Run("a chain of GPU policies in the order written", func(t *testing.T) { gpuChains(t, e, e.installed(t)) })
	t.Run("a GPU that comes and goes", func(t *testing.T) { gpuComesAndGoes(t, e, e.installed(t)) })
	t.Run("static MIG instances", func(t *testing.T) { staticMIG(t, e, e.installed(t)) })
	t.Run("MIG instances made on demand", func(t *testing.T) { onDemandMIG(t, e, e.installed(t)) })
	t.Run("node policy", func(t *testing.T) { nodePolicy(t, e, e.installed(t)) })
	t.Run("node without vgpud avoided", func(t *testing.T) { nodeWithoutVgpud(t, e, e.installed(t)) })
	t.Run("pod network across nodes", func(t *testing.T) { acrossNodes(t, e, e.installed(t)) })
	t.Run("GPU freed to a waiting pod", func(t *testing.T) { freedGPU(t, e, e.installed(t)) })
	t.Run("priority preemption by GPU memory", func(t *testing.T) { preemption(t, e, e.installed(t)) })
	t.Run("Kueue queues, admits and gangs GPU Jobs", func(t *testing.T) { kueueJobs(t, e, e.installed(t)) })
	t.Run("pods HAMi placed are avoided", func(t *testing.T) { fromHAMi(t, e, e.installed(t)) })
	t.Run("dashboards and alerts on a real Prometheus", func(t *testing.T) { monitoring(t, e, e.installed(t)) })
	t.Run("rolling upgrade, one node ahead", func(t *testing.T) { rollingUpgrade(t, e, e.installed(t)) })
	t.Run("GPU memory held from the node", func(t *testing.T) { gpuUsage(t, e, e.installed(t)) })
	t.Run("a forked holder ended with its container; held memory booked", func(t *testing.T) { forkAndHold(t, e, e.installed(t)) })
	t.Run("a full GPU holds everyone to their slice", func(t *testing.T) { fullGPU(t, e, e.installed(t)) })
	t.Run("what the enforcer knows survives a restart", func(t *testing.T) { heldAcrossRestart(t, e, e.installed(t)) })
	t.Run("memory held past its pod charged to its namespace", func(t *testing.T) { heldCharged(t, e, e.installed(t)) })
	// Before the removal, whose reinstall puts the ConfigMap back as shipped.
	t.Run("cluster settings from the ConfigMap", func(t *testing.T) { clusterSettings(t, e, e.installed(t)) })
	// Last: it removes vgpud (and puts it back for the soak).
	t.Run("removal leaves every node starting containers", func(t *testing.T) { removal(t, e, e.installed(t)) })
}

func nodeNameLine(extra string) string {
	if extra == "nodeName" {
		return "  nodeName: vgpud-node\n"
	}
	return ""
}

func privLine(extra string) string {
	if extra == "privileged" {
		return "    securityContext: {privileged: true}\n"
	}
	return ""
}

// checkNoOversubscription sums every running pod's assignment per GPU and
// compares with the nodes' inventories.
func checkNoOversubscription(t *testing.T, e env) {
	t.Helper()
	for _, over := range oversubscribed(t, e) {
		t.Error(over)
	}
}

// use is what pods hold of one GPU.
type use = harness.GPUUse

// apiUsage sums, per GPU UUID, the assignments of the pods that have not
// terminated.
func apiUsage(e env) (map[string]*use, error) {
	pods, err := e.kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used, _, errs := harness.AssignedUse(pods.Items)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return used, nil
}

// oversubscribed names every GPU whose pods hold more than it has.
func oversubscribed(t *testing.T, e env) []string {
	t.Helper()
	nodes, err := e.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used, err := apiUsage(e)
	if err != nil {
		t.Fatal(err)
	}
	var over []string
	for _, n := range nodes.Items {
		inv, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		for _, g := range inv.GPUs {
			u := used[g.UUID]
			if u == nil {
				continue
			}
			t.Logf("%s GPU %d: %d/%d MiB, %d/%d cores, %d/%d slices", n.Name, g.Index, u.MemMiB, g.MemoryMiB, u.Cores, g.Cores, u.Slices, g.Split)
			if u.MemMiB > g.MemoryMiB || u.Cores > g.Cores || u.Slices > g.Split {
				over = append(over, fmt.Sprintf("%s GPU %d oversubscribed: %+v of %+v", n.Name, g.Index, *u, g))
			}
		}
		// A MIG instance is held whole: one slice at most.
		for _, g := range inv.MIG {
			for _, in := range g.Instances {
				if u := used[in.UUID]; u != nil && (u.Slices > 1 || u.MemMiB > in.MemoryMiB) {
					over = append(over, fmt.Sprintf("%s GPU %d MIG %s %s double-booked: %+v", n.Name, g.Index, in.Profile, in.UUID, *u))
				}
			}
		}
	}
	return over
}

// perNode counts ns's pods by node.
func (e env) perNode(t *testing.T, ns string) map[string]int {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		out[p.Spec.NodeName]++
	}
	return out
}
