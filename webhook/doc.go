// Package webhook is vgpud's mutating admission webhook for pods.
//
// The transport (http.go: body limit, content type, AdmissionReview v1 and
// v1beta1) is split from the decision (Pods.Decide, pure on a *corev1.Pod) and
// from the response (a minimal JSON patch against the raw object). Its TLS
// certificate is managed by package certs.
package webhook
