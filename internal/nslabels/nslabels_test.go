package nslabels

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestApplyMergesTheLabels(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Labels: map[string]string{"team": "ml", "pod-security.kubernetes.io/enforce": "baseline"}}})
	labels, err := Parse([]string{"pod-security.kubernetes.io/enforce=privileged", "vgpud.io/webhook=ignore"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Apply(t.Context(), cs.CoreV1(), "gpu", labels, &out); err != nil {
		t.Fatal(err)
	}
	ns, _ := cs.CoreV1().Namespaces().Get(t.Context(), "gpu", metav1.GetOptions{})
	want := map[string]string{"team": "ml", "pod-security.kubernetes.io/enforce": "privileged", "vgpud.io/webhook": "ignore"}
	for k, v := range want {
		if ns.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, ns.Labels[k], v, ns.Labels)
		}
	}
	if err := Apply(t.Context(), cs.CoreV1(), "absent", labels, &out); err == nil {
		t.Error("labelled a namespace that does not exist")
	}
	if err := Apply(t.Context(), cs.CoreV1(), "", labels, &out); err == nil || !strings.Contains(err.Error(), "POD_NAMESPACE") {
		t.Errorf("no namespace: %v", err)
	}
}

func TestParseRefusesWhatIsNoLabel(t *testing.T) {
	for _, bad := range [][]string{nil, {"novalue"}, {"bad key=x"}, {"k=bad value"}} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
