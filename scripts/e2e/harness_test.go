//go:build e2e

// Package e2e runs vgpud against a real kube-apiserver (scripts/apiserver.sh)
// and checks what only a real apiserver can prove: admission over TLS with
// the certificate vgpud manages, denials as kubectl sees them, and leader
// election with its label. Run through `make e2e`.
package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vgpud/vgpud/scripts/harness"
)

const ns = "vgpud-system"

// env is what scripts/e2e.sh hands the tests.
type env struct {
	kubeconfig string
	vgpud      string // the built binary
	kube       kubernetes.Interface
}

func setup(t *testing.T) env {
	t.Helper()
	v := harness.Getenv(t, "make e2e", "KUBECONFIG", "VGPUD_BIN")
	return env{kubeconfig: v[0], vgpud: v[1], kube: harness.Client(t, v[0], 500)}
}

// replica is one `vgpud run --roles=cluster` process posing as a DaemonSet pod.
type replica struct {
	*harness.Process
	name   string
	listen string
}

func (e env) ensurePod(t *testing.T, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	harness.EnsureNamespace(t, e.kube, namespace, nil)
	_, err := e.kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vgpud", Image: "vgpud:e2e"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
}

func (e env) start(t *testing.T, name, listen string) *replica {
	t.Helper()
	e.ensurePod(t, ns, name)
	p := harness.Spawn(t, name, e.vgpud, "run", "--roles=cluster", "--listen="+listen, "--extender-listen="+extListen, "--metrics-listen=",
		"--pod-name="+name, "--pod-namespace="+ns, "--kubeconfig="+e.kubeconfig, "--log-format=text")
	return &replica{Process: p, name: name, listen: listen}
}

func (e env) leaders(t *testing.T) []string {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "vgpud.io/role=leader"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name)
	}
	return out
}
