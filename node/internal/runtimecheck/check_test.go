package runtimecheck

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/nodemetrics"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The annotation stays small whatever the configuration says.
func TestEncodeRuntimeIsBounded(t *testing.T) {
	long := strings.Repeat("é", 1000)
	raw, err := encodeRuntime(preflight.Verdict{Result: preflight.FailsOpen, Runtime: "containerd", Files: []string{long}, Problems: []string{long, long, long, long, long, long}})
	if err != nil {
		t.Fatal(err)
	}
	var c protocol.RuntimeCheck
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	if len(raw) > 2500 || len(c.Problems) != 5 || !strings.Contains(c.Problems[4], "2 more") || !utf8.ValidString(c.Problems[0]) {
		t.Errorf("%d bytes, %d problems: %q", len(raw), len(c.Problems), c.Problems)
	}
}

// With the check turned off (--runtime-config empty) no verdict from an
// earlier run stays on the node, and nothing is exported.
func TestRuntimeCheckOffClearsTheNode(t *testing.T) {
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
		wellknown.AnnotationRuntime: `{"result":"fails-closed","runtime":"containerd"}`, "other": "kept"}}})
	reg := prometheus.NewRegistry()
	c := New(Options{}, "", kube.CoreV1(), "n1", nodemetrics.New(reg), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[wellknown.AnnotationRuntime]; ok || n.Annotations["other"] != "kept" {
		t.Fatalf("node annotations after the check was turned off: %v", n.Annotations)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "vgpud_node_runtime_fails_closed" && len(f.GetMetric()) > 0 {
			t.Fatalf("%s exported with the check off", f.GetName())
		}
	}
}
