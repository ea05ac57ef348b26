// Package webhook is vgpud's mutating admission webhook for pods.
//
// The transport (NewHTTPHandler: body limit, content type, AdmissionReview
// v1 and v1beta1) is split from the decision (Pods.Decide, pure on a
// *corev1.Pod) and from the response (a minimal JSON patch against the raw
// object). Its TLS certificate is the leader's listener's, kept by
// cluster/server/certs; the cluster role (cluster.Role) wires it as
//
//	h := webhook.NewHTTPHandler(webhook.NewPods(cfg, schedulerName, resourceNames, quotas), log)
//	// "/webhook" -> h on the leader's HTTPS listener
package webhook
