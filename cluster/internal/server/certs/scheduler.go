package certs

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// kube-scheduler reads the CA and its client certificate once, at start:
// a change reaches it only through a restart of its pods, which the
// manager asks for by setting AnnotationTrustHash on the pod template.

// schedulerRunsWith says whether every kube-scheduler pod runs with what
// s holds. Without a Deployment to watch there is nothing to wait for.
func (m *Manager) schedulerRunsWith(ctx context.Context, s *corev1.Secret) (bool, error) {
	if s == nil {
		return true, nil
	}
	if _, ph := readTrust(s.Data[KeyCACert], s.Data[KeyCAKey], s.Data[KeyCANextKey]); ph != introducing && ph != switched {
		return true, nil // no rotation step waits on it
	}
	d, err := m.schedulerDeployment(ctx)
	if d == nil || err != nil {
		return err == nil, err
	}
	want := TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert])
	if d.Spec.Template.Annotations[AnnotationTrustHash] != want || !rolledOut(d) {
		return false, nil
	}
	// The Deployment counts a terminating pod as gone, but its kube-scheduler
	// still calls the extender with what it read at start until it exits.
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return false, fmt.Errorf("kube-scheduler deployment %s: selector: %w", d.Name, err)
	}
	pods, err := m.api.Pods.Pods(m.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return false, fmt.Errorf("list kube-scheduler pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Annotations[AnnotationTrustHash] != want {
			return false, nil
		}
	}
	return true, nil
}

// restartScheduler sets the pod template's hash to what b holds, which
// rolls kube-scheduler's pods when it changes. A template without the
// hash is left alone while nothing kube-scheduler read was replaced: at
// install its pods wait for the Secret's keys and read them when they come.
func (m *Manager) restartScheduler(ctx context.Context, b bundle) error {
	d, err := m.schedulerDeployment(ctx)
	if d == nil || err != nil {
		return err
	}
	want := TrustHash(b.trust.caCert(), b.client.Cert)
	have := d.Spec.Template.Annotations[AnnotationTrustHash]
	if have == want || (have == "" && b.phase == steady && !b.clientRenewed) {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, AnnotationTrustHash, want)
	if _, err := m.api.Deployments.Deployments(m.cfg.Namespace).Patch(ctx, d.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("restart kube-scheduler %s/%s for its new TLS files: %w", m.cfg.Namespace, d.Name, err)
	}
	m.log.Info("kube-scheduler restarting to read its new TLS files", "deployment", d.Name, "phase", b.phase.String(), "hash", want)
	return nil
}

// schedulerDeployment is kube-scheduler's Deployment, nil when none is
// configured or it does not exist.
func (m *Manager) schedulerDeployment(ctx context.Context) (*appsv1.Deployment, error) {
	if m.cfg.SchedulerDeployment == "" {
		return nil, nil
	}
	d, err := m.api.Deployments.Deployments(m.cfg.Namespace).Get(ctx, m.cfg.SchedulerDeployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kube-scheduler deployment %s/%s: %w", m.cfg.Namespace, m.cfg.SchedulerDeployment, err)
	}
	return d, nil
}

// rolledOut says every replica of d runs its current template.
func rolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want
}
