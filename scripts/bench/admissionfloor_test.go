//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/scripts/harness"
)

const (
	// floorNamespace is served by the leader floor's webhook alone:
	// vgpud's skips it by its opt-out label.
	floorNamespace = "admit-floor"
	floorLabel     = "bench.vgpud.io/webhook-floor"
	floorHook      = "floor.bench.vgpud.io"
	// floorWebhookPort is where the leader floor answers reviews, on
	// loopback; the apiserver calls it by the serving certificate's host
	// name.
	floorWebhookPort = "9446"
)

// admissionPod is the pod each admission create writes: a GPU pod
// that names no scheduler, so that the webhook sets it.
func admissionPod(name string) *corev1.Pod {
	p := gpuPodSpec(name)
	p.Spec.SchedulerName = ""
	return p
}

// floorWebhook starts the leader floor's webhook and registers it as
// vgpud (the first webhook of vgpud's configuration, as the bench
// registered it: the same rules, match conditions, failure policy and
// timeout) for floorNamespace alone, until stop, which the caller calls
// before the bench goes on: the later runs see neither the process nor
// its registration. It reports false, and does nothing, without
// VGPUD_LEADER_FLOOR.
func (e env) floorWebhook(t *testing.T, ctx context.Context, vgpud *admissionregistrationv1.MutatingWebhookConfiguration) (started bool, stop func()) {
	bin := os.Getenv("VGPUD_LEADER_FLOOR")
	if bin == "" {
		return false, func() {}
	}
	harness.EnsureNamespace(t, e.kube, floorNamespace, map[string]string{"vgpud.io/webhook": "ignore", floorLabel: "true"})
	floor := harness.Spawn(t, "leaderfloor-webhook", bin, "--kubeconfig="+e.kubeconfig, "--webhook-listen=127.0.0.1:"+floorWebhookPort, "--watch=false")
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vgpud-bench-floor"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{*vgpud.Webhooks[0].DeepCopy()},
	}
	w := &cfg.Webhooks[0]
	w.Name = floorHook
	w.ClientConfig.URL = ptr.To("https://" + host + ":" + floorWebhookPort + "/webhook")
	w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{floorLabel: "true"}}
	if _, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return true, func() {
		_ = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
		floor.Stop(t)
	}
}

// sameWrites fails unless the floor's webhook leaves the bench's pod as
// vgpud's does: otherwise the floor's creates would write another pod,
// and the rows would not compare.
func (e env) sameWrites(t *testing.T, ctx context.Context) {
	got := func(ns string) *corev1.Pod {
		p, err := e.kube.CoreV1().Pods(ns).Create(ctx, admissionPod("same-writes"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A service account's token volume is named at random per pod.
		p.Spec.Volumes = nil
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].VolumeMounts = nil
		}
		return p
	}
	hooked, floored := got("admit"), got(floorNamespace)
	if reflect.DeepEqual(hooked.Annotations, floored.Annotations) && reflect.DeepEqual(hooked.Labels, floored.Labels) && reflect.DeepEqual(hooked.Spec, floored.Spec) {
		return
	}
	show := func(p *corev1.Pod) string {
		b, _ := json.Marshal(map[string]any{"annotations": p.Annotations, "labels": p.Labels, "spec": p.Spec})
		return string(b)
	}
	t.Fatalf("the floor's webhook wrote another pod than vgpud's; change scripts/bench/leaderfloor/webhook.go to make vgpud's changes:\nvgpud: %s\nfloor: %s", show(hooked), show(floored))
}
