//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// TestCompat runs on a cluster of another Kubernetes version than the
// suite's (make e2e brings up v1.34 and v1.37, two nodes each, with
// VGPUD_COMPAT=1): a fresh install with the chart, which chooses its
// objects by what the apiserver serves; a GPU pod placed with its env;
// the leader SIGKILLed while GPU pods are created; where the previous
// release installs (1.36 and newer), an upgrade from it; and removal.
func TestCompat(t *testing.T) {
	if os.Getenv("VGPUD_COMPAT") == "" {
		t.Skip("runs on a cluster of another Kubernetes version (VGPUD_COMPAT=1 K8S_VERSION=v1.34.4); make e2e brings them up")
	}
	e := setup(t)
	e.last = true
	ctx := context.Background()
	sv, err := e.kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	tag, minor, err := manifests.KubernetesVersion(sv.GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	policy := minor >= manifests.PolicyKubernetesMinor
	t.Logf("Kubernetes %s: MutatingAdmissionPolicy v1 expected %v", sv.GitVersion, policy)

	var nodes []string
	t.Run("fresh install with the chart", func(t *testing.T) {
		nodes = installWithChart(t, e)
		served := false
		if rs, err := e.kube.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1"); err == nil {
			for _, r := range rs.APIResources {
				served = served || r.Kind == "MutatingAdmissionPolicy"
			}
		}
		if served != policy {
			t.Fatalf("Kubernetes %s serves MutatingAdmissionPolicy v1: %v; want %v", tag, served, policy)
		}
		_, err := e.kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, e.name("-gpu-pods"), metav1.GetOptions{})
		if policy && err != nil {
			t.Errorf("the chart installed no vgpud-gpu-pods policy where the apiserver serves it: %v", err)
		}
		d, err := e.kube.AppsV1().Deployments(system).Get(ctx, e.name("-scheduler"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/kube-scheduler:"+tag {
			t.Errorf("the chart runs %s; want the cluster's own version, registry.k8s.io/kube-scheduler:%s", img, tag)
		}
		t.Logf("the chart chose: gpu-pods policy %v, kube-scheduler %s", policy, tag)
		if e.fullname != "vgpud" {
			// Installed under fullnameOverride: the replicas lead by the
			// Lease of that name, and nothing is named vgpud.
			harness.Eventually(t, 30*time.Second, "the leader Lease "+e.name("-leader")+" held", func() error {
				l, err := e.kube.CoordinationV1().Leases(system).Get(ctx, e.name("-leader"), metav1.GetOptions{})
				if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
					return fmt.Errorf("lease %v: %v", l, err)
				}
				return nil
			})
			if _, err := e.kube.CoordinationV1().Leases(system).Get(ctx, "vgpud-leader", metav1.GetOptions{}); err == nil {
				t.Error("installed under fullnameOverride, but a vgpud-leader Lease is there")
			}
			if _, err := e.kube.AppsV1().DaemonSets(system).Get(ctx, "vgpud", metav1.GetOptions{}); err == nil {
				t.Error("installed under fullnameOverride, but a vgpud DaemonSet is there")
			}
			t.Logf("every object named %s: the leader holds Lease %s", e.fullname, e.name("-leader"))
		}
	})
	if len(nodes) == 0 {
		t.FailNow()
	}
	t.Run("one pod end to end", func(t *testing.T) { onePodEndToEnd(t, e, nodes) })
	t.Run("SIGKILL the leader while GPU pods are created", func(t *testing.T) { sigkillFailover(t, e, policy) })
	if policy {
		t.Run("upgrade from the previous release", func(t *testing.T) { upgradeFromRelease(t, e, e.installed(t)) })
	}
	t.Run("removal", func(t *testing.T) { removal(t, e, e.installed(t)) })
}

// sigkillFailover SIGKILLs the leader and creates GPU pods (one each poll)
// until a successor admits one. Where the vgpud-gpu-pods policy makes GPU
// pods placeable in the apiserver, no create may be refused; without it
// (Kubernetes 1.34, 1.35) creates are refused until a successor serves,
// each with the message that says so, and the window is measured. Every
// pod admitted runs on its assignment.
func sigkillFailover(t *testing.T, e env, policy bool) {
	ctx := context.Background()
	ns := "e2e-compat-sigkill"
	e.namespace(t, ns, nil)
	old, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := sigkillLeader(t, e); err != nil {
		t.Fatal(err)
	}
	var refused, created []string
	var lastRefusal time.Duration
	took := harness.Eventually(t, 120*time.Second, "a GPU pod admitted by a successor", func() error {
		p, err := e.kube.CoreV1().Pods(ns).Create(ctx, gpuPod(fmt.Sprintf("p-%03d", len(created)+len(refused)), map[string]string{"nvidia.com/gpumem": "500"}, nil), metav1.CreateOptions{})
		if err != nil {
			lastRefusal = time.Since(killed)
			refused = append(refused, fmt.Sprintf("%.1fs: %v", lastRefusal.Seconds(), err))
			if !strings.Contains(err.Error(), "no vgpud replica answered its webhook") {
				t.Fatalf("a create refused without saying why: %v", err)
			}
			return err
		}
		created = append(created, p.Name)
		// A successor: another replica, or the killed one's container
		// restarted (its restarts count moved).
		if l, err := e.leader(); err != nil || (l.UID == old.UID && restarts(l) == restarts(old)) {
			return fmt.Errorf("admitted, but %s has not handed over", old.Name)
		}
		return nil
	})
	switch {
	case policy && len(refused) > 0:
		t.Errorf("with the vgpud-gpu-pods policy a SIGKILLed leader refused %d creates: %v", len(refused), refused)
	case len(refused) > 0:
		t.Logf("without the vgpud-gpu-pods policy: %d creates refused, the last %v after the SIGKILL, e.g. %s", len(refused), lastRefusal.Round(time.Millisecond), refused[0])
	}
	t.Logf("leader %s SIGKILLed -> a successor admits GPU pods after %v; %d created, %d refused", old.Name, took.Round(time.Millisecond), len(created), len(refused))
	harness.Eventually(t, 180*time.Second, "every pod admitted runs on its assignment", func() error {
		for _, name := range created {
			p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("%s failed: %s", name, p.Status.Message)
			}
			if p.Annotations[wellknown.AnnotationAssignment] == "" || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%s: phase %s", name, p.Status.Phase)
			}
		}
		return nil
	})
	e.daemonSetReady(t)
	if err := e.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
