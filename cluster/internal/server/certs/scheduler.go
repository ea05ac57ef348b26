package certs

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kube-scheduler reads the CA and its client certificate once, at start:
// a change reaches it only through new pods. The manager deletes the pods
// that predate the change, one at a time, and lets their ReplicaSet start
// new ones; it leaves the Deployment as applied, so a GitOps tool that
// syncs it has nothing to revert.
//
// Which pods predate the change is read from the apiserver's own clock:
// once the Secret holds new trust, the manager records on it the hash and
// the time of its last write (AnnotationTrustSince, the newest
// managedFields time, at or after the write that brought the trust). A
// pod created in a later second than that was created after the write,
// and its kubelet mounts the Secret as it then was (its cache follows a
// watch, milliseconds behind); a pod created at or before it is replaced.

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
	if s.Annotations[AnnotationTrustHash] != TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert]) {
		return false, nil // not recorded yet: no pod is known to have read it
	}
	since, err := trustSince(s)
	if err != nil {
		return false, err
	}
	pods, err := m.schedulerPods(ctx, d)
	if err != nil {
		return false, err
	}
	// A terminating pod's kube-scheduler still calls the extender with
	// what it read at start until it exits.
	live := int32(0)
	for _, p := range pods {
		if p.DeletionTimestamp != nil || !createdAfter(p, since) || !podReady(p) {
			return false, nil
		}
		live++
	}
	return live >= replicas(d), nil
}

// restartScheduler makes kube-scheduler's pods read what the Secret s
// (as last read or written) holds: it records the trust and when it came,
// then deletes, one per call, a pod created before that. The first trust
// ever recorded restarts nothing while nothing kube-scheduler read was
// replaced: at install its pods wait for the Secret's keys and read them
// when they come.
func (m *Manager) restartScheduler(ctx context.Context, s *corev1.Secret, b bundle) error {
	d, err := m.schedulerDeployment(ctx)
	if d == nil || err != nil {
		return err
	}
	want := TrustHash(b.trust.caCert(), b.client.Cert)
	have, recorded := s.Annotations[AnnotationTrustHash]
	if have != want {
		since := ""
		if recorded || b.phase != steady || b.clientRenewed {
			at, ok := lastWrite(s)
			if !ok {
				return fmt.Errorf("secret %s/%s: the apiserver recorded no write time (managedFields), so which kube-scheduler pods read it is unknown", s.Namespace, s.Name)
			}
			since = at.UTC().Format(time.RFC3339)
		}
		// Deleting comes at the next check, at least a second on: a pod
		// created in the write's own second would read as older.
		return m.recordTrust(ctx, s, want, since)
	}
	since, err := trustSince(s)
	if err != nil || since.IsZero() {
		return err
	}
	return m.replaceOlderPods(ctx, d, since, want)
}

// recordTrust writes on s the hash kube-scheduler must run with and the
// time after which a new pod reads it ("" when every pod already does).
// A write lost to another writer is left to the next check.
func (m *Manager) recordTrust(ctx context.Context, s *corev1.Secret, hash, since string) error {
	s = s.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationTrustHash] = hash
	if since == "" {
		delete(s.Annotations, AnnotationTrustSince)
	} else {
		s.Annotations[AnnotationTrustSince] = since
	}
	_, err := m.api.Secrets.Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		m.log.Info("webhook certificate secret changed while recording kube-scheduler's trust; checking again", "secret", s.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("record kube-scheduler's trust on secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if since != "" {
		m.log.Info("kube-scheduler pods created before the new TLS files will be replaced", "hash", hash, "since", since)
	}
	return nil
}

// replaceOlderPods deletes one kube-scheduler pod created at or before
// since. A pod that is not ready goes first; a ready one only while no
// pod terminates and every other is ready, so at most one replica is
// down at a time, as a rolling update with no surge would have it.
func (m *Manager) replaceOlderPods(ctx context.Context, d *appsv1.Deployment, since time.Time, hash string) error {
	pods, err := m.schedulerPods(ctx, d)
	if err != nil {
		return err
	}
	var older []*corev1.Pod
	ready := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			return nil // wait for it to go
		}
		if podReady(p) {
			ready++
		}
		if !createdAfter(p, since) {
			older = append(older, p)
		}
	}
	var victim *corev1.Pod
	for _, p := range older {
		if !podReady(p) {
			victim = p
			break
		}
	}
	if victim == nil && len(older) > 0 && ready == len(pods) {
		victim = older[0]
	}
	if victim == nil {
		return nil
	}
	uid := victim.UID
	err = m.api.Pods.Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restart kube-scheduler: delete pod %s/%s, which predates its new TLS files: %w", victim.Namespace, victim.Name, err)
	}
	m.log.Info("kube-scheduler pod deleted to read its new TLS files", "pod", victim.Name, "created", victim.CreationTimestamp.UTC().Format(time.RFC3339), "hash", hash)
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

// schedulerPods are the pods of d that run or may run kube-scheduler: a
// pod that failed or completed runs nothing.
func (m *Manager) schedulerPods(ctx context.Context, d *appsv1.Deployment) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler deployment %s: selector: %w", d.Name, err)
	}
	list, err := m.api.Pods.Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list kube-scheduler pods: %w", err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// trustSince is the Secret's AnnotationTrustSince; zero when absent.
func trustSince(s *corev1.Secret) (time.Time, error) {
	v := s.Annotations[AnnotationTrustSince]
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("secret %s/%s: annotation %s=%q is not an RFC 3339 time: %w", s.Namespace, s.Name, AnnotationTrustSince, v, err)
	}
	return t, nil
}

// lastWrite is the newest time the apiserver recorded for a write of s
// (creation included): at or after the write that brought what s holds.
func lastWrite(s *corev1.Secret) (time.Time, bool) {
	var t time.Time
	for _, f := range s.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t, !t.IsZero()
}

// createdAfter says p was created in a later second than since. The
// apiserver keeps both times to the second.
func createdAfter(p *corev1.Pod, since time.Time) bool {
	return p.CreationTimestamp.Truncate(time.Second).After(since.Truncate(time.Second))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}
