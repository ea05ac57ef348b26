//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// gpuAgents is #53 item 5: a GPU agent (DCGM exporter) keeps every GPU
// only under its own ServiceAccount in a namespace a cluster admin
// labelled vgpud.io/gpu-agents=true. The same pod under another account,
// or in a namespace named gpu-operator that a user who may make
// namespaces made, sees none: its env is refused at create by
// vgpud-slice-env, and through envFrom (which admission cannot read)
// voided by the runtime hook. Only whom RBAC grants exempt on gpuagents.vgpud.io
// sets the label, and the hook reads it live.
func gpuAgents(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	const agentNS, fakeNS, exporter = "e2e-agents", "gpu-operator", "nvidia-dcgm-exporter"
	e.namespace(t, agentNS, map[string]string{wellknown.LabelGPUAgents: "true"})
	// An earlier run's namespace of the operator's name goes first.
	if err := e.namespaceGone(fakeNS); err != nil {
		t.Fatal(err)
	}

	// A user who may make and edit namespaces, not exempt them; and one
	// who also holds vgpud's agents-admin role.
	maker := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-namespace-maker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create", "update", "patch"}}}}
	bindings := []*rbacv1.ClusterRoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-namespace-makers"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: maker.Name},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "e2e-ns-maker"}, {Kind: "User", Name: "e2e-agents-admin"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-agents-admins"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: e.name("-gpu-agents-admin")},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "e2e-agents-admin"}}},
	}
	remove := func() {
		for _, b := range bindings {
			_ = e.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
		}
		_ = e.kube.RbacV1().ClusterRoles().Delete(context.Background(), maker.Name, metav1.DeleteOptions{})
	}
	remove() // an aborted run's
	t.Cleanup(func() {
		if t.Failed() {
			e.dump(t, fakeNS)
		}
		remove()
		grace := int64(0)
		_ = e.kube.CoreV1().Pods(fakeNS).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		_ = e.kube.CoreV1().Namespaces().Delete(context.Background(), fakeNS, metav1.DeleteOptions{})
	})
	if _, err := e.kube.RbacV1().ClusterRoles().Create(ctx, maker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings {
		if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The label is an admin's: the maker can neither create a namespace
	// with it nor add it; the agents' admin can, with "true" alone.
	labelled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fakeNS, Labels: map[string]string{wellknown.LabelGPUAgents: "true"}}}
	asMaker, asAdmin := e.impersonate(t, "e2e-ns-maker", nil), e.impersonate(t, "e2e-agents-admin", nil)
	harness.Eventually(t, 30*time.Second, "the maker's namespace with the label refused", func() error {
		_, err := asMaker.CoreV1().Namespaces().Create(ctx, labelled, metav1.CreateOptions{})
		return harness.Contains(fmt.Sprint(err), "needs the verb exempt on gpuagents.vgpud.io", "e2e-ns-maker")
	})
	if _, err := asMaker.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fakeNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the maker's namespace %s without the label: %v", fakeNS, err)
	}
	label := func(as interface {
		Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Namespace, error)
	}, ns, value string, dry bool) error {
		v := "null"
		if value != "" {
			v = fmt.Sprintf("%q", value)
		}
		opts := metav1.PatchOptions{}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := as.Patch(ctx, ns, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, wellknown.LabelGPUAgents, v)), opts)
		return err
	}
	if err := label(asMaker.CoreV1().Namespaces(), fakeNS, "true", false); err == nil || !strings.Contains(err.Error(), "needs the verb exempt") {
		t.Errorf("the maker labels %s: %v; want refused", fakeNS, err)
	}
	if err := label(asMaker.CoreV1().Namespaces(), agentNS, "", true); err == nil || !strings.Contains(err.Error(), "needs the verb exempt") {
		t.Errorf("the maker unlabels %s: %v; want refused", agentNS, err)
	}
	harness.Eventually(t, 30*time.Second, "the agents' admin labels "+fakeNS+" (dry run)", func() error { return label(asAdmin.CoreV1().Namespaces(), fakeNS, "true", true) })
	if err := label(asAdmin.CoreV1().Namespaces(), fakeNS, "yes", true); err == nil || !strings.Contains(err.Error(), `takes the value "true" only`) {
		t.Errorf("the agents' admin labels %s yes: %v; want refused", fakeNS, err)
	}

	// The agent pods: DCGM exporter's account in each namespace, the
	// GPU env through envFrom in each.
	for _, ns := range []string{agentNS, fakeNS} {
		if _, err := e.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: exporter}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "all-gpus"}, Data: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agent := func(name, account string, inSpec, fromMap bool) *corev1.Pod {
		p := gpuPod(name, nil, nil)
		p.Spec.ServiceAccountName, p.Spec.NodeName = account, nodes[0]
		c := &p.Spec.Containers[0]
		if inSpec {
			c.Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		}
		if fromMap {
			c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "all-gpus"}}}}
		}
		return p
	}
	create := func(ns string, p *corev1.Pod) error {
		_, err := e.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	// What a pod's container sees once it runs: the hook overrides the
	// ConfigMap's NVIDIA_VISIBLE_DEVICES=all of a pod that is no agent.
	sees := func(ns, pod string) string {
		t.Helper()
		e.waitRunning(t, ns, []string{pod}, 60*time.Second)
		return e.containerEnv(t, ns, pod)["NVIDIA_VISIBLE_DEVICES"]
	}

	// The agent: its own env and its ConfigMap's both stand.
	start := time.Now()
	for name, p := range map[string]*corev1.Pod{"dcgm-spec": agent("dcgm-spec", exporter, true, false), "dcgm-map": agent("dcgm-map", exporter, false, true)} {
		if err := create(agentNS, p); err != nil {
			t.Fatalf("the agent %s in %s: %v", name, agentNS, err)
		}
	}
	e.waitRunning(t, agentNS, []string{"dcgm-spec", "dcgm-map"}, 90*time.Second)
	for _, pod := range []string{"dcgm-spec", "dcgm-map"} {
		if got := e.containerEnv(t, agentNS, pod)["NVIDIA_VISIBLE_DEVICES"]; got != "all" {
			t.Errorf("the agent %s sees NVIDIA_VISIBLE_DEVICES=%q, want all", pod, got)
		}
	}
	t.Logf("the agent under %s in labelled %s: running with NVIDIA_VISIBLE_DEVICES=all (spec and envFrom) in %s", exporter, agentNS, time.Since(start).Round(time.Millisecond))

	// The same pod under another account, and under the agent's account
	// in the namespace of the operator's name that the maker made.
	for _, c := range []struct{ ns, account string }{{agentNS, "default"}, {fakeNS, exporter}} {
		err := create(c.ns, agent("spec-env", c.account, true, false))
		if err == nil || !strings.Contains(err.Error(), "sets in its env which devices the NVIDIA runtime exposes") {
			t.Errorf("%s under %s with NVIDIA_VISIBLE_DEVICES=all in its spec: %v; want refused by vgpud-slice-env", c.ns, c.account, err)
		}
		if err := create(c.ns, agent("map-env", c.account, false, true)); err != nil {
			t.Fatal(err)
		}
		if got := sees(c.ns, "map-env"); got != "void" {
			t.Errorf("%s under %s with NVIDIA_VISIBLE_DEVICES=all from its ConfigMap sees %q, want void", c.ns, c.account, got)
		}
		t.Logf("%s under %s: NVIDIA_VISIBLE_DEVICES=all in the spec refused at create; from a ConfigMap, voided by the hook", c.ns, c.account)
	}

	// The label taken off: the agent's pods there see no GPU once the
	// node's watch has the change (docs/security.md: within its delay;
	// the first pod after it is counted).
	if err := label(e.kube.CoreV1().Namespaces(), agentNS, "", false); err != nil {
		t.Fatal(err)
	}
	off := time.Now()
	for i := 0; ; i++ {
		name := fmt.Sprintf("dcgm-after-%d", i)
		if err := create(agentNS, agent(name, exporter, false, true)); err != nil {
			t.Fatal(err)
		}
		got := sees(agentNS, name)
		if got == "void" {
			t.Logf("label taken off %s: the agent's pod %d created %s later sees no GPU", agentNS, i, time.Since(off).Round(time.Millisecond))
			break
		}
		if i >= 2 {
			t.Fatalf("the agent's pod %s, %s after the label came off %s, sees %q, want void", name, time.Since(off).Round(time.Millisecond), agentNS, got)
		}
	}
}
