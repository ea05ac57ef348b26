package gpuagents

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// unstreamed is the fake's core client saying, as the fake clientset
// itself does, that it cannot stream an informer's initial list.
type unstreamed struct{ corev1client.CoreV1Interface }

func (unstreamed) IsWatchListSemanticsUnSupported() bool { return true }

type labelled map[string]bool

func (labelled) HasSynced() bool { return true }

func (l labelled) Labelled(ns string) (bool, error) {
	if ns == "unread" {
		return false, errors.New("not in yet")
	}
	return l[ns], nil
}

func TestRuleNeedsTheAccountAndTheLabel(t *testing.T) {
	r := Rule{Accounts: []string{"nvidia-dcgm-exporter", "vgpud"}, Namespaces: labelled{"gpu-operator": true}}
	for _, tc := range []struct {
		ns, account string
		want        bool
		err         string
	}{
		{"gpu-operator", "nvidia-dcgm-exporter", true, ""},
		{"gpu-operator", "default", false, ""},
		{"gpu-operator", "", false, ""},
		{"team-a", "nvidia-dcgm-exporter", false, ""},
		// An account not listed never asks the namespaces.
		{"unread", "default", false, ""},
		{"unread", "vgpud", false, "namespace unread: not in yet"},
	} {
		got, err := r.Exempt(tc.ns, tc.account)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Exempt(%s, %s) = %v, %v; want %v, %q", tc.ns, tc.account, got, err, tc.want, tc.err)
		}
	}
	if got, err := (Rule{Accounts: []string{"vgpud"}}).Exempt("x", "vgpud"); got || err != nil {
		t.Errorf("without namespaces: %v, %v", got, err)
	}
}

func TestNamespacesFollowTheLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-operator", Labels: map[string]string{wellknown.LabelGPUAgents: "true"}}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "named-alike", Labels: map[string]string{wellknown.LabelGPUAgents: "yes"}}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		)
		n, err := NewNamespaces(unstreamed{cs.CoreV1()}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Labelled("gpu-operator"); err == nil {
			t.Fatal("answered before its first list")
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		n.Start(ctx)
		synctest.Wait()
		if ok, err := n.Labelled("gpu-operator"); !ok || err != nil {
			t.Fatalf("Labelled(gpu-operator) = %v, %v after the first list", ok, err)
		}
		for _, ns := range []string{"named-alike", "team-a", "absent"} {
			if ok, err := n.Labelled(ns); ok || err != nil {
				t.Errorf("Labelled(%s) = %v, %v", ns, ok, err)
			}
		}
		// The label taken off drops the namespace (the fake ignores the
		// selector on watch, so the stored copy's label is judged too).
		ns, _ := cs.CoreV1().Namespaces().Get(ctx, "gpu-operator", metav1.GetOptions{})
		ns.Labels = nil
		if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ok, err := n.Labelled("gpu-operator"); ok || err != nil {
			t.Errorf("Labelled(gpu-operator) = %v, %v once the label is off", ok, err)
		}
		cancel()
		synctest.Wait()
	})
}
