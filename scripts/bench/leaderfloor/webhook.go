//go:build bench

package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// admit answers an admission review as thinly as a mutating webhook that
// schedules GPU pods can: it reads the review and, of the pod, only
// whether it has annotations, and answers with the two changes any such
// webhook makes to a pod (its scheduler, the runtime hook it requires),
// as JSON patch operations, the same that vgpud's answer holds for the
// bench's pod. What kube-apiserver spends calling it and applying its
// patch, and the write of the larger pod, is what any webhook adds to a
// create on this machine: the floor under vgpud's admission row.
func admit(w http.ResponseWriter, r *http.Request) {
	var review struct {
		metav1.TypeMeta `json:",inline"`
		Request         *struct {
			UID    types.UID `json:"uid"`
			Object struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"object"`
		} `json:"request"`
	}
	// vgpud's bound (webhook.MaxBodyBytes), not imported: the floor links
	// no more than it must.
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 7<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("no admission review: %v", err), http.StatusBadRequest)
		return
	}
	ops := []map[string]any{{"op": "add", "path": "/spec/schedulerName", "value": "vgpud-scheduler"}}
	if review.Request.Object.Metadata.Annotations == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{wellknown.AnnotationRequiredPlugins: wellknown.RequiredPluginsVgpud}})
	} else {
		// The key holds neither / nor ~: nothing to escape.
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + wellknown.AnnotationRequiredPlugins, "value": wellknown.RequiredPluginsVgpud})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	pt := admissionv1.PatchTypeJSONPatch
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: &admissionv1.AdmissionResponse{
		UID: review.Request.UID, Allowed: true, PatchType: &pt, Patch: patch}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// serveWebhook answers admission reviews at /webhook with admit, over
// server TLS as vgpud's webhook port does (kube-apiserver sends no client
// certificate).
func serveWebhook(cert tls.Certificate, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhook", admit)
	srv := &http.Server{Addr: addr, Handler: mux, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}}
	return srv.ListenAndServeTLS("", "")
}
