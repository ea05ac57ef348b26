package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// allowed admits the object unchanged.
func allowed(reason string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Result: &metav1.Status{Code: http.StatusOK, Message: reason}}
}

// denied refuses the object; the apiserver shows message to the user.
func denied(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: message,
	}}
}

// errored refuses the object because it could not be judged.
func errored(code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: err.Error()}}
}

// patchResponse admits the object with ops as a JSON patch.
func patchResponse(ops []jsonpatch.Operation) (*admissionv1.AdmissionResponse, error) {
	if len(ops) == 0 {
		return allowed("no change needed"), nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encode patch: %w", err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}, nil
}
