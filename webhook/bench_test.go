package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// BenchmarkAdmission times one admission in process: the HTTP handler
// decoding a four-container review, deciding, diffing and encoding the
// answer. It reports p50 and p99 of the timed iterations.
func BenchmarkAdmission(b *testing.B) {
	_, body := readReview(b, "visible_devices_none")
	cfg := testConfig()
	cfg.VisibleDevicesNone = true
	h := NewHTTPHandler(newPods(cfg, quotas{"ai-team": {Memory: podmodel.Limit{Set: true, Hard: 1 << 40}}}), quietLog())
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		durations = append(durations, time.Since(start))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.StopTimer()
	slices.Sort(durations)
	pct := func(p float64) float64 { return float64(durations[int(p*float64(len(durations)-1))]) / 1e3 }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkAdmissionHugePod times the largest review a tenant can send
// the leader: one pod of 90 000 env entries, about 5 MB, through
// the HTTP handler. The patch is built from what changed, so this is
// decoding; a generic JSON diff of the pod cost 710 ms and 199 MB here.
func BenchmarkAdmissionHugePod(b *testing.B) {
	env := make([]corev1.EnvVar, 90000)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("VARIABLE_NUMBER_%d", i), Value: "some-value-xx"}
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "flood", Namespace: "ai"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main", Env: env, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("1000")}}}}}}
	raw, err := json.Marshal(&pod)
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "flood", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: admissionv1.Create, Namespace: "ai", Name: "flood", Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := NewHTTPHandler(newPods(testConfig(), nil), quietLog())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"allowed":true`) {
			b.Fatalf("status %d: %.200s", w.Code, w.Body)
		}
	}
}
