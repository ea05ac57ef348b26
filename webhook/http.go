package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
)

// MaxBodyBytes bounds a review. The apiserver caps a request at 3 MiB; an
// AdmissionReview can carry the object twice (object and oldObject).
const MaxBodyBytes = 7 << 20

// NewHTTPHandler serves AdmissionReview admission.k8s.io/v1 and v1beta1 for
// h, answering in the version asked. Transport faults are 4xx with a
// plain-text message; the handler's decision is always a 200 review.
func NewHTTPHandler(h Handler, log *slog.Logger) http.Handler {
	return &endpoint{handler: h, log: log}
}

type endpoint struct {
	handler Handler
	log     *slog.Logger
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		http.Error(w, fmt.Sprintf("content type %q: want application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return
	}
	// Timed from here: reading the body spends the apiserver's wait too.
	ctx, cancel := reviewContext(r)
	defer cancel()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("admission review larger than %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The server's read deadline passed with the body unread: the
			// leader was too busy to read it in time, which says nothing
			// against the review; the apiserver may send it again.
			w.Header().Set("Retry-After", "1")
			http.Error(w, "admission review not read within the server's read timeout; vgpud is busy, try again", http.StatusTooManyRequests)
			return
		}
		http.Error(w, "read admission review: "+err.Error(), http.StatusBadRequest)
		return
	}
	review, err := decodeReview(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := e.handler.Handle(ctx, req)
	resp.UID = req.UID
	e.logDecision(req, resp)

	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	data, err := json.Marshal(out)
	if err != nil {
		http.Error(w, "encode admission review: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		e.log.Debug("write admission review", "err", err)
	}
}

// answerMargin is what a review's answer is given to reach the apiserver
// within its timeout.
const answerMargin = 500 * time.Millisecond

// reviewContext ends with the apiserver's wait for the review (the
// timeout it sends as a query parameter, less answerMargin), so that a
// handler that waits answers in time rather than be skipped: past it,
// the apiserver applies the failure policy, which for some is Ignore.
func reviewContext(r *http.Request) (context.Context, context.CancelFunc) {
	d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
	if err != nil || d <= 0 {
		return context.WithCancel(r.Context())
	}
	return context.WithTimeout(r.Context(), max(d-answerMargin, d/2))
}

// decodeReview reads an AdmissionReview of either version. v1beta1 has the
// same JSON shape as v1, so both decode into the v1 type and the TypeMeta
// says which version to answer in.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("decode admission review: %w", err)
	}
	tm := review.TypeMeta
	if tm.Kind != "AdmissionReview" || (tm.APIVersion != admissionv1.SchemeGroupVersion.String() && tm.APIVersion != admissionv1beta1.SchemeGroupVersion.String()) {
		return nil, fmt.Errorf("got apiVersion %q kind %q: want kind AdmissionReview in %s or %s",
			tm.APIVersion, tm.Kind, admissionv1.SchemeGroupVersion, admissionv1beta1.SchemeGroupVersion)
	}
	if review.Request == nil {
		return nil, errors.New("admission review has no request")
	}
	if review.Request.UID == "" {
		return nil, errors.New("admission review request has no uid")
	}
	return &review, nil
}

func (e *endpoint) logDecision(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
	msg := ""
	if resp.Result != nil {
		msg = resp.Result.Message
	}
	attrs := []any{"namespace", req.Namespace, "name", req.Name, "uid", req.UID, "allowed", resp.Allowed, "patched", len(resp.Patch) > 0, "message", msg}
	if resp.Allowed {
		e.log.Debug("admission", attrs...)
		return
	}
	e.log.Info("admission denied", attrs...)
}
