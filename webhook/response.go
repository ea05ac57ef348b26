package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

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

// patchResponse admits the object with a JSON patch that turns raw into
// mutated. original is raw decoded and re-encoded unchanged: the ops that
// appear for it too only restate raw in Go's encoding (a null
// creationTimestamp, a field this client-go does not know), so they are
// dropped and the patch touches only what the webhook changed.
func patchResponse(raw []byte, original, mutated any) (*admissionv1.AdmissionResponse, error) {
	ops, err := minimalPatch(raw, original, mutated)
	if err != nil {
		return nil, err
	}
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

func minimalPatch(raw []byte, original, mutated any) ([]jsonpatch.Operation, error) {
	orig, err := json.Marshal(original)
	if err != nil {
		return nil, fmt.Errorf("encode original object: %w", err)
	}
	mut, err := json.Marshal(mutated)
	if err != nil {
		return nil, fmt.Errorf("encode mutated object: %w", err)
	}
	noise, err := jsonpatch.CreatePatch(raw, orig)
	if err != nil {
		return nil, fmt.Errorf("diff original object: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(raw, mut)
	if err != nil {
		return nil, fmt.Errorf("diff mutated object: %w", err)
	}
	out := ops[:0]
	for _, op := range ops {
		if !containsOp(noise, op) {
			out = append(out, op)
		}
	}
	return out, nil
}

func containsOp(ops []jsonpatch.Operation, op jsonpatch.Operation) bool {
	for _, o := range ops {
		if o.Operation == op.Operation && o.Path == op.Path && reflect.DeepEqual(o.Value, op.Value) {
			return true
		}
	}
	return false
}
