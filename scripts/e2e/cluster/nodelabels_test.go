//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// nodeLabels: each node carries vgpud's report of what it serves, which
// agrees with the inventory the leader books; a replica writes that
// report on its own node alone and no other label there; and vgpud's
// pods are placed by Node Feature Discovery's label or vgpud.io/gpu as
// well as GPU feature discovery's.
func nodeLabels(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	for _, n := range nodes {
		harness.Eventually(t, 30*time.Second, "node "+n+"'s labels agree with its inventory", func() error {
			node, err := e.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			inv, err := protocol.DecodeInventory(node.Annotations[wellknown.AnnotationGPUs])
			if err != nil {
				return err
			}
			want := expectedLabels(inv)
			for k, v := range want {
				if node.Labels[k] != v {
					return fmt.Errorf("%s=%q, want %q (labels %v)", k, node.Labels[k], v, node.Labels)
				}
			}
			t.Logf("node %s: %v", n, want)
			return nil
		})
	}

	// A replica labels only its own node, and only with the report.
	p, err := e.vgpudPod(nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	as := e.asReplica(t, p)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	label := func(node, key, value string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
		_, err := as.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), dry)
		return err
	}
	if err := label(nodes[0], wellknown.LabelGPUCount, "64"); err != nil {
		t.Errorf("replica %s writing the report on its own node %s: %v", p.Name, nodes[0], err)
	}
	for _, c := range []struct{ node, key, want string }{
		{nodes[1], wellknown.LabelGPUCount, "may change only the Node it runs on"},
		{nodes[0], wellknown.LabelGPUNode, "vgpud changes no labels but"},
		{nodes[0], "vgpud.io/gpu.pool", "vgpud changes no labels but"},
		{nodes[0], "node-role.kubernetes.io/gpu", "vgpud changes no labels but"},
	} {
		if err := label(c.node, c.key, "true"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("replica %s labelling node %s %s: %v; want refused, %q", p.Name, c.node, c.key, err, c.want)
		}
	}

	// Placed without GPU feature discovery: one node by NFD's label,
	// another by vgpud.io/gpu, GFD's taken off both; vgpud stays on each
	// (the DaemonSet controller deletes a pod whose node no term matches
	// within a second: "node without vgpud avoided").
	if len(nodes) < 3 {
		t.Fatalf("want three nodes, have %v", nodes)
	}
	swap := map[string]string{nodes[1]: "feature.node.kubernetes.io/pci-10de.present", nodes[2]: wellknown.LabelGPUNode}
	before := map[string]types.UID{}
	for n, key := range swap {
		vp, err := e.vgpudPod(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = vp.UID
		relabel(t, e, n, fmt.Sprintf(`{%q:"true",%q:null}`, key, gpuLabel))
		t.Cleanup(func() { relabel(t, e, n, fmt.Sprintf(`{%q:null,%q:"true"}`, key, gpuLabel)) })
	}
	time.Sleep(5 * time.Second)
	ds, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, e.name(""), metav1.GetOptions{})
	if err != nil || int(ds.Status.DesiredNumberScheduled) != len(nodes) {
		t.Fatalf("without GPU feature discovery's label on %v: DaemonSet %+v (%v); want it on all %d nodes", swap, ds.Status, err, len(nodes))
	}
	for n, uid := range before {
		if vp, err := e.vgpudPod(n); err != nil || vp.UID != uid || vp.DeletionTimestamp != nil {
			t.Errorf("node %s, labelled %s only: vgpud's pod %v went (%v)", n, swap[n], uid, err)
		}
	}
	t.Logf("vgpud stays on %s by NFD's label and on %s by %s alone", nodes[1], nodes[2], wellknown.LabelGPUNode)
}

// relabel merge-patches node's labels with the JSON object patch.
func relabel(t *testing.T, e env, node, patch string) {
	t.Helper()
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(`{"metadata":{"labels":`+patch+`}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// expectedLabels is what a node whose inventory is inv reports: its GPUs
// and MIG GPUs by model, count, the smallest memory offered, the split.
func expectedLabels(inv protocol.Inventory) map[string]string {
	var models []string
	memory, split := int64(-1), 0
	for _, g := range inv.GPUs {
		models, split = append(models, g.Model), g.Split
		if memory < 0 || g.MemoryMiB < memory {
			memory = g.MemoryMiB
		}
	}
	for _, g := range inv.MIG {
		models = append(models, g.Model)
		if memory < 0 || g.MemoryMiB < memory {
			memory = g.MemoryMiB
		}
	}
	if len(models) == 0 {
		return map[string]string{wellknown.LabelGPUProduct: "none", wellknown.LabelGPUCount: "0"}
	}
	// The mocks' models have no character a label refuses but spaces.
	product := strings.ReplaceAll(models[0], " ", "-")
	for _, m := range models {
		if m != models[0] {
			product = "mixed"
		}
	}
	mode := map[bool]string{true: wellknown.MIGMixed, false: wellknown.MIGDisabled}[len(inv.MIG) > 0]
	if len(inv.GPUs) == 0 {
		mode = wellknown.MIGEnabled
	}
	want := map[string]string{
		wellknown.LabelGPUProduct: product, wellknown.LabelGPUCount: strconv.Itoa(len(inv.GPUs) + len(inv.MIG)),
		wellknown.LabelGPUMemory: strconv.FormatInt(memory, 10), wellknown.LabelGPUSplit: strconv.Itoa(split), wellknown.LabelMIGMode: mode,
	}
	// A GPU in MIG mode can run it; one not in it may or may not.
	if len(inv.MIG) > 0 {
		want[wellknown.LabelMIGCapable] = "true"
	}
	return want
}
