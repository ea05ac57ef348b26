package inventory

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestBuildAndPublishOnlyOnChange(t *testing.T) {
	lib, err := gpu.Open("mock:dgxa100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	inv := Build(devs, Scaling{Split: 10, Memory: 1.5, Cores: 1}, map[string]bool{devs[3].UUID: true}, OnDemand{})
	if len(inv.GPUs) != 8 || inv.GPUs[0].MemoryMiB != 61440 || inv.GPUs[0].Cores != 100 || inv.GPUs[0].Split != 10 || inv.GPUs[3].Healthy || !inv.GPUs[2].Healthy {
		t.Fatalf("inventory %+v", inv.GPUs)
	}

	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kept": "yes"}}})
	p := NewPublisher(kube.CoreV1(), "n1")
	labels := Labels(devs, Scaling{Split: 10, Memory: 1.5, Cores: 1})
	p.SetLabels(labels)
	ctx := context.Background()
	if wrote, err := p.Publish(ctx, inv); err != nil || !wrote {
		t.Fatalf("first publish: wrote %v, err %v", wrote, err)
	}
	if wrote, err := p.Publish(ctx, inv); err != nil || wrote {
		t.Fatalf("unchanged inventory written again: %v %v", wrote, err)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	back, err := protocol.DecodeInventory(n.Annotations[wellknown.AnnotationGPUs])
	if err != nil || len(back.GPUs) != 8 || back.GPUs[3].Healthy {
		t.Fatalf("annotation %v: %v", back, err)
	}
	// The labels in the same patch, beside the node's own.
	for k, v := range labels {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Labels["kept"] != "yes" || n.Labels[wellknown.LabelGPUCount] != "8" {
		t.Errorf("labels %v", n.Labels)
	}
	patches := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	if patches != 2 {
		t.Errorf("%d patches, want 2: the annotation, then the labels", patches)
	}
	if _, err := NewPublisher(kube.CoreV1(), "missing").Publish(ctx, inv); err == nil {
		t.Error("a missing node must be an error")
	}
}

// The identity and plugin-state annotations are merged into the node's,
// leaving the inventory as it was.
func TestSetIdentityAndPluginState(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: "kept"}}})
	p := NewPublisher(kube.CoreV1(), "n1")
	if err := p.SetIdentity(ctx, wellknown.IdentityRuntime); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPluginState(ctx, wellknown.PluginServing); err != nil {
		t.Fatal(err)
	}
	n, err := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{wellknown.AnnotationGPUs: "kept", wellknown.AnnotationIdentity: wellknown.IdentityRuntime, wellknown.AnnotationPlugin: wellknown.PluginServing}
	for k, v := range want {
		if n.Annotations[k] != v {
			t.Errorf("%s=%q, want %q (all: %v)", k, n.Annotations[k], v, n.Annotations)
		}
	}
	if err := NewPublisher(kube.CoreV1(), "gone").SetIdentity(ctx, wellknown.IdentityGuessed); err == nil {
		t.Error("SetIdentity on a node that does not exist: no error")
	}
}

// A node turned to --gpu-usage=off takes its earlier usage down, and
// leaves every other annotation.
func TestSetAndClearUsage(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{wellknown.AnnotationGPUs: "kept"}}})
	p := NewPublisher(kube.CoreV1(), "n1")
	annotations := func() map[string]string {
		n, err := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	if err := p.SetUsage(ctx, `{"mode":"report"}`); err != nil {
		t.Fatal(err)
	}
	if got := annotations()[wellknown.AnnotationUsage]; got != `{"mode":"report"}` {
		t.Fatalf("usage annotation %q after SetUsage", got)
	}
	if err := p.ClearUsage(ctx); err != nil {
		t.Fatal(err)
	}
	got := annotations()
	if _, ok := got[wellknown.AnnotationUsage]; ok || got[wellknown.AnnotationGPUs] != "kept" {
		t.Errorf("after ClearUsage: %v; want the usage gone, the rest kept", got)
	}
	// Clearing what is not there is no error: a node that never reported.
	if err := p.ClearUsage(ctx); err != nil {
		t.Errorf("ClearUsage twice: %v", err)
	}
}

// The labels go in a patch of their own, after the annotation: refused,
// the inventory is written all the same and the labels are tried again
// at the next Publish, unchanged inventory or not; a Publisher given no
// labels writes none.
func TestLabelsApartFromTheInventory(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	refuse := true
	kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if refuse && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"labels"`) {
			return true, nil, errors.New("refused by a policy")
		}
		return false, nil, nil
	})
	inv := protocol.Inventory{Version: protocol.Version, GPUs: []protocol.GPU{{UUID: "GPU-1", MemoryMiB: 1000, Cores: 100, Split: 2, Healthy: true}}}
	p := NewPublisher(kube.CoreV1(), "n1")
	labels := map[string]string{wellknown.LabelGPUCount: "1"}
	p.SetLabels(labels)
	if wrote, err := p.Publish(ctx, inv); err == nil || !wrote {
		t.Fatalf("labels refused: wrote %v, err %v; want the inventory written and the refusal said", wrote, err)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if n.Annotations[wellknown.AnnotationGPUs] == "" || len(n.Labels) != 0 {
		t.Fatalf("after a refusal of the labels: annotations %v, labels %v", n.Annotations, n.Labels)
	}
	refuse = false
	if wrote, err := p.Publish(ctx, inv); err != nil || !wrote {
		t.Fatalf("labels again, inventory unchanged: wrote %v, err %v", wrote, err)
	}
	if n, _ = kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); n.Labels[wellknown.LabelGPUCount] != "1" {
		t.Fatalf("labels %v", n.Labels)
	}
	if wrote, err := p.Publish(ctx, inv); err != nil || wrote {
		t.Errorf("nothing changed, written again: %v %v", wrote, err)
	}
	// A Publisher given no labels writes none (the identity's, the
	// runtime check's).
	other := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kept": "yes"}}})
	if _, err := NewPublisher(other.CoreV1(), "n1").Publish(ctx, inv); err != nil {
		t.Fatal(err)
	}
	for _, a := range other.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(pa.GetPatch()), `"labels"`) {
			t.Errorf("a Publisher without labels patched %s", pa.GetPatch())
		}
	}
}
