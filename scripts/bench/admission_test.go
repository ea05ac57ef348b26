//go:build bench

package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"
)

// admission measures what the webhook adds to a GPU pod's create, per
// request: with the webhook registered, the same pod is created in turn
// in a namespace the webhook serves and in one it skips (vgpud.io/webhook:
// ignore), 300 pairs, in each order in turn, and each pair's
// difference counted; beside it, the apiserver's own measure of the call
// (apiserver_admission_webhook_admission_duration_seconds, its mean over
// the same creates). With VGPUD_LEADER_FLOOR, a third namespace is
// served by the leader floor's webhook (scripts/bench/leaderfloor
// --webhook-listen: decode, two patch operations, answer), registered
// just as vgpud's is, and its creates join each pair: what any webhook
// adds to a create here, the part of vgpud's row that is kube-apiserver's
// and the machine's.
func (e env) admission(t *testing.T) {
	ctx := context.Background()
	harness.EnsureNamespace(t, e.kube, "admit", nil)
	harness.EnsureNamespace(t, e.kube, "admit-skip", map[string]string{"vgpud.io/webhook": "ignore"})
	mwc, err := manifests.WebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	// No kube-proxy here: the Service's host name by URL, on loopback. The
	// leader fills caBundle in at start; this configuration comes later.
	byURL(&mwc.Webhooks[0], e.servingCA(t, ctx))
	if _, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{})
		for _, ns := range []string{"admit", "admit-skip", floorNamespace} {
			_ = e.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}
	}()
	floor, stopFloor := e.floorWebhook(t, ctx, mwc)
	defer stopFloor()
	create := func(ns, name string) (time.Duration, bool) {
		start := time.Now()
		got, err := e.kube.CoreV1().Pods(ns).Create(ctx, admissionPod(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The apiserver itself copies limits to requests; the webhook's
		// own mark is the runtime hook required of the pod.
		_, marked := got.Annotations[wellknown.AnnotationRequiredPlugins]
		return time.Since(start), marked
	}
	harness.Eventually(t, 30*time.Second, "webhook mutating", func() error {
		if _, mutated := create("admit", fmt.Sprintf("probe-%d", time.Now().UnixNano())); !mutated {
			return fmt.Errorf("not mutated yet")
		}
		return nil
	})
	if _, mutated := create("admit-skip", "probe"); mutated {
		t.Fatal("the webhook mutated a pod in a namespace labelled vgpud.io/webhook=ignore: the pairs would compare it with itself")
	}
	if floor {
		harness.Eventually(t, 30*time.Second, "the floor's webhook mutating", func() error {
			if _, mutated := create(floorNamespace, fmt.Sprintf("probe-%d", time.Now().UnixNano())); !mutated {
				return fmt.Errorf("not mutated yet")
			}
			return nil
		})
		e.sameWrites(t, ctx)
	}
	// A few pairs first, uncounted: both paths warm.
	for i := range 10 {
		create("admit-skip", fmt.Sprintf("warm-plain-%d", i))
		create("admit", fmt.Sprintf("warm-hooked-%d", i))
		if floor {
			create(floorNamespace, fmt.Sprintf("warm-floor-%d", i))
		}
	}
	const pairs = 300
	hook := mwc.Webhooks[0].Name
	sum0, n0 := e.webhookCalls(t, hook)
	fsum0, fn0 := e.webhookCalls(t, floorHook)
	served0, servedN0 := leaderWebhookTime(t)
	var without, with, added, floorAdded []time.Duration
	// Every order in turn, so that each create follows each other as
	// often, and is first as often.
	orders := permutations(2)
	if floor {
		orders = permutations(3)
	}
	for i := range pairs {
		var a, b, f time.Duration
		steps := []func(){
			func() { a, _ = create("admit-skip", fmt.Sprintf("plain-%d", i)) },
			func() { b, _ = create("admit", fmt.Sprintf("hooked-%d", i)) },
		}
		if floor {
			steps = append(steps, func() { f, _ = create(floorNamespace, fmt.Sprintf("floor-%d", i)) })
		}
		for _, k := range orders[i%len(orders)] {
			steps[k]()
		}
		without, with, added = append(without, a), append(with, b), append(added, b-a)
		if floor {
			floorAdded = append(floorAdded, f-a)
		}
	}
	sum1, n1 := e.webhookCalls(t, hook)
	fsum1, fn1 := e.webhookCalls(t, floorHook)
	served1, servedN1 := leaderWebhookTime(t)
	if servedN1 > servedN0 {
		// Of the call's time, what the leader's handler took (from the
		// request read to the answer written, TLS aside).
		t.Logf("the leader's own time per webhook request (vgpud_extender_request_seconds, verb webhook): %.3f ms mean of %.0f", (served1-served0)/(servedN1-servedN0)*1000, servedN1-servedN0)
	}
	without, with, added = sortDur(without), sortDur(with), sortDur(added)
	e.record(t, "admission", "GPU pod create through kube-apiserver, in a namespace the webhook skips (p50 / p99)", fmt.Sprintf("%.2f / %.2f ms", pct(without, 0.5), pct(without, 0.99)), "-", "-")
	e.record(t, "admission", "the same, in a namespace the webhook serves (p50 / p99)", fmt.Sprintf("%.2f / %.2f ms", pct(with, 0.5), pct(with, 0.99)), "-", "-")
	e.record(t, "admission", fmt.Sprintf("added by the webhook, per request: %d pairs of creates, each pair's difference, the mutated pod's larger write included (p50 / p90)", pairs),
		fmt.Sprintf("%.2f / %.2f ms", pct(added, 0.5), pct(added, 0.9)), "p50 <= 1 ms", metIf(pct(added, 0.5) <= 1))
	if floor {
		floorAdded = sortDur(floorAdded)
		e.record(t, "admission", "floor: added by a webhook that only decodes the review and answers the same two patch operations (scripts/bench/leaderfloor --webhook-listen), registered as vgpud's is, its creates in turn with the pairs above (p50 / p90)",
			fmt.Sprintf("%.2f / %.2f ms", pct(floorAdded, 0.5), pct(floorAdded, 0.9)), "-", "-")
	}
	if n1 > n0 {
		e.record(t, "admission", fmt.Sprintf("the webhook's call as kube-apiserver times it (apiserver_admission_webhook_admission_duration_seconds), mean of %.0f calls", n1-n0),
			fmt.Sprintf("%.2f ms", (sum1-sum0)/(n1-n0)*1000), "-", "-")
	}
	if fn1 > fn0 {
		e.record(t, "admission", fmt.Sprintf("floor: its call as kube-apiserver times it, mean of %.0f calls", fn1-fn0),
			fmt.Sprintf("%.2f ms", (fsum1-fsum0)/(fn1-fn0)*1000), "-", "-")
	}
}

// webhookCalls is the sum (seconds) and count of kube-apiserver's
// admission webhook duration histogram for the webhook named name.
func (e env) webhookCalls(t *testing.T, name string) (sum, count float64) {
	raw, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	sum, n, err := harness.HistogramTotals(bytes.NewReader(raw), "apiserver_admission_webhook_admission_duration_seconds", func(l map[string]string) bool { return l["name"] == name })
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	return sum, float64(n)
}

// leaderWebhookTime is the sum (seconds) and count of the leader's
// vgpud_extender_request_seconds for the webhook.
func leaderWebhookTime(t *testing.T) (sum, count float64) {
	resp, err := http.Get("http://127.0.0.1:9090/metrics")
	if err != nil {
		t.Logf("leader metrics: %v", err)
		return 0, 0
	}
	defer resp.Body.Close()
	sum, n, err := harness.HistogramTotals(resp.Body, "vgpud_extender_request_seconds", func(l map[string]string) bool { return l["verb"] == "webhook" })
	if err != nil {
		t.Logf("leader metrics: %v", err)
		return 0, 0
	}
	return sum, float64(n)
}

// servingCA is the CA the leader's webhook certificate is signed by.
func (e env) servingCA(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	s, err := e.kube.CoreV1().Secrets("vgpud-system").Get(ctx, "vgpud-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data["ca.crt"]
}

// byURL points w at the leader on loopback by the Service's host name
// (no kube-proxy here), trusting ca.
func byURL(w *admissionregistrationv1.MutatingWebhook, ca []byte) {
	w.ClientConfig.CABundle = ca
	w.ClientConfig.URL = ptr.To("https://" + host + ":9443" + *w.ClientConfig.Service.Path)
	w.ClientConfig.Service = nil
}

// permutations lists every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int{}, p[:at]...), n-1), p[at:]...)
			out = append(out, q)
		}
	}
	return out
}
