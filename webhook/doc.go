// Package webhook is vgpud's mutating admission webhook for pods.
//
// The transport (NewHTTPHandler: body limit, content type, AdmissionReview
// v1 and v1beta1) is split from the decision (Pods.Decide, pure on a
// *corev1.Pod) and from the response (a minimal JSON patch against the raw
// object). Its TLS certificate is kept by package certs.
//
// The cluster role wires it, while it leads, as
//
//	cfg.Webhook.SchedulerName = cfg.Cluster.SchedulerName
//	mgr := certs.NewManager(cfg.Webhook.Certs(podNamespace), kube, log, time.Now)
//	go mgr.Run(ctx)                                        // Secret, caBundle, renewal
//	h := webhook.NewHTTPHandler(webhook.NewPods(cfg.Webhook, quotas), log)
//	// HTTPS listener: tls.Config{GetCertificate: mgr.GetCertificate},
//	// "/webhook" -> h, and mgr.Ready among the /readyz checks.
package webhook
