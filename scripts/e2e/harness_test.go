//go:build e2e

// Package e2e runs vgpud against a real kube-apiserver (scripts/apiserver.sh)
// and checks what only a real apiserver can prove: admission over TLS with
// the certificate vgpud manages, denials as kubectl sees them, and leader
// election with its label. Run through `make e2e`.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
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
	kc, bin := os.Getenv("KUBECONFIG"), os.Getenv("VGPUD_BIN")
	if kc == "" || bin == "" {
		t.Fatal("KUBECONFIG and VGPUD_BIN must be set; run through `make e2e`")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	// The scale test creates thousands of objects; client-go's default 5 QPS
	// would take an hour.
	rc.QPS, rc.Burst = 500, 1000
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return env{kubeconfig: kc, vgpud: bin, kube: kube}
}

// replica is one `vgpud run --roles=cluster` process posing as a DaemonSet pod.
type replica struct {
	name   string
	listen string
	cmd    *exec.Cmd
	log    string
}

func (e env) ensurePod(t *testing.T, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	e.ensureNamespace(t, namespace, nil)
	_, err := e.kube.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vgpud", Image: "vgpud:e2e"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
}

// ensureNamespace creates it with a default ServiceAccount: there is no
// controller-manager here to make one, and pods need it.
func (e env) ensureNamespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	_, err = e.kube.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create serviceaccount %s/default: %v", name, err)
	}
}

func (e env) start(t *testing.T, name, listen string) *replica {
	t.Helper()
	e.ensurePod(t, ns, name)
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.vgpud, "run", "--roles=cluster", "--listen="+listen, "--metrics-listen=",
		"--pod-name="+name, "--pod-namespace="+ns, "--kubeconfig="+e.kubeconfig, "--log-format=text")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, listen: listen, cmd: cmd, log: logPath}
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("log of %s:\n%s", name, b)
		}
	})
	return r
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

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		if err = f(); err == nil {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
	return 0
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

func contains(s string, subs ...string) error {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return errorf("%q does not contain %q", s, sub)
		}
	}
	return nil
}
