package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func post(h http.Handler, contentType string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHTTPAnswersInKind(t *testing.T) {
	h := NewHTTPHandler(newPods(testConfig(), nil), quietLog())
	for _, tt := range []struct{ file, version string }{
		{"mem_only_adds_gpu", "admission.k8s.io/v1"},
		{"limits_only_v1beta1", "admission.k8s.io/v1beta1"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			review, body := readReview(t, tt.file)
			w := post(h, "application/json; charset=utf-8", body)
			if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("status %d content type %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if out.APIVersion != tt.version || out.Kind != "AdmissionReview" || out.Request != nil {
				t.Fatalf("answered as %s %s (request echoed: %v), want %s AdmissionReview", out.APIVersion, out.Kind, out.Request != nil, tt.version)
			}
			if out.Response == nil || out.Response.UID != review.Request.UID || !out.Response.Allowed {
				t.Fatalf("response %+v: want allowed with uid %s", out.Response, review.Request.UID)
			}
			pod, _ := applyPatch(t, review.Request.Object.Raw, out.Response)
			if pod.Spec.SchedulerName != "vgpud-scheduler" {
				t.Fatalf("patched schedulerName %q", pod.Spec.SchedulerName)
			}
		})
	}
}

func TestHTTPDenialIsAReview(t *testing.T) {
	h := NewHTTPHandler(newPods(testConfig(), nil), quietLog())
	_, body := readReview(t, "privileged_gpu")
	w := post(h, "application/json", body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusOK {
		t.Fatalf("status %d: %v", w.Code, err)
	}
	if out.Response.Allowed || out.Response.Result.Code != http.StatusForbidden || !strings.Contains(out.Response.Result.Message, "privileged") {
		t.Fatalf("response %+v", out.Response.Result)
	}
}

func TestHTTPTransportFaults(t *testing.T) {
	h := NewHTTPHandler(newPods(testConfig(), nil), quietLog())
	_, good := readReview(t, "mem_only_adds_gpu")
	tests := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		code        int
		msg         string
	}{
		{"GET", http.MethodGet, "application/json", good, http.StatusMethodNotAllowed, "POST"},
		{"no content type", http.MethodPost, "", good, http.StatusUnsupportedMediaType, "want application/json"},
		{"yaml", http.MethodPost, "application/yaml", good, http.StatusUnsupportedMediaType, "want application/json"},
		{"too big", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MaxBodyBytes+1), http.StatusRequestEntityTooLarge, "larger than"},
		{"empty", http.MethodPost, "application/json", nil, http.StatusBadRequest, "decode admission review"},
		{"not JSON", http.MethodPost, "application/json", []byte("{"), http.StatusBadRequest, "decode admission review"},
		{"wrong kind", http.MethodPost, "application/json", []byte(`{"apiVersion":"v1","kind":"Pod"}`), http.StatusBadRequest, `got apiVersion "v1" kind "Pod"`},
		{"v2", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"u"}}`), http.StatusBadRequest, "want kind AdmissionReview"},
		{"no request", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "no request"},
		{"no uid", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`), http.StatusBadRequest, "no uid"},
		{"request of wrong type", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[]}`), http.StatusBadRequest, "decode admission review"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "/webhook", bytes.NewReader(tt.body))
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", w.Code, w.Body, tt.code, tt.msg)
			}
		})
	}
}

// deadlineBody is a body whose read the server's deadline cut short, as
// net/http and its HTTP/2 server report it.
type deadlineBody struct{}

func (deadlineBody) Read([]byte) (int, error) {
	return 0, fmt.Errorf("read: %w", os.ErrDeadlineExceeded)
}

// A review the leader could not read before the server's read deadline
// (a flood of large ones on a busy leader) is answered as load: 429, to
// send again, not 400, which would call the review bad.
func TestHTTPBodyReadTimeoutIsLoad(t *testing.T) {
	h := NewHTTPHandler(newPods(testConfig(), nil), quietLog())
	r := httptest.NewRequest(http.MethodPost, "/webhook", deadlineBody{})
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "read timeout") {
		t.Fatalf("got %d %q (Retry-After %q), want 429 saying the read timed out", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}

// A review's handler may wait only as long as the apiserver waits for
// its answer (the timeout it sends), less the answer's way back: past
// it, the apiserver applies the failure policy, Ignore for some.
func TestReviewContextEndsBeforeTheApiserversWait(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  time.Duration // 0: no deadline
	}{
		{"?timeout=5s", 5*time.Second - answerMargin},
		{"?timeout=800ms", 400 * time.Millisecond},
		{"", 0},
		{"?timeout=soon", 0},
	} {
		r := httptest.NewRequest(http.MethodPost, "/webhook"+tc.query, nil)
		start := time.Now()
		ctx, cancel := reviewContext(r)
		d, ok := ctx.Deadline()
		cancel()
		if ok != (tc.want > 0) || (ok && (d.Sub(start) > tc.want+100*time.Millisecond || d.Sub(start) < tc.want-time.Second)) {
			t.Errorf("%q: deadline in %v (%v); want %v", tc.query, d.Sub(start), ok, tc.want)
		}
	}
}
