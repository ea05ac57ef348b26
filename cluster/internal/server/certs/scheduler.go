package certs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
// Which pods predate the change is read from the apiserver's own clock.
// Once the Secret holds new trust, the manager asks the apiserver for the
// time (a dry-run write, which it stamps) and records it on the Secret
// with the trust's hash (AnnotationTrustSince, AnnotationTrustHash). The
// write that brought the trust had returned, so was stored, before that
// time: a pod created in a later second was created after it, and its
// kubelet mounts the Secret as stored (its cache follows a watch,
// milliseconds behind). A pod created at or before it is replaced. The
// apiservers' clocks are taken to agree to within a second.

// sinceNone records that no kube-scheduler pod predates the trust.
const sinceNone = "none"

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
	since, recorded, err := trustRecord(s, TrustHash(s.Data[KeyCACert], s.Data[KeyClientCert]))
	if !recorded || err != nil {
		return false, err // no pod is known to have read it
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
// (as last read or written) holds: it records the trust and since when
// the Secret holds it, then deletes, one per call, a pod created before.
// pending says a pod is still to be replaced, so the next call should
// come soon.
func (m *Manager) restartScheduler(ctx context.Context, s *corev1.Secret, b bundle) (pending bool, err error) {
	d, err := m.schedulerDeployment(ctx)
	if d == nil || err != nil {
		return false, err
	}
	want := TrustHash(b.trust.caCert(), b.client.Cert)
	since, recorded, err := trustRecord(s, want)
	if err != nil {
		return false, err
	}
	if !recorded {
		// Deleting comes at the next check, at least a second on: a pod
		// created in the recorded second would read as older.
		return true, m.recordTrust(ctx, s, d, want)
	}
	if since.IsZero() {
		return false, nil
	}
	return m.replaceOlderPods(ctx, d, since, want)
}

// recordTrust writes on s the hash kube-scheduler must run with and the
// apiserver's time now, after which a new pod reads it; or sinceNone
// when no pod can hold anything older. A write lost to another writer is
// left to the next check.
func (m *Manager) recordTrust(ctx context.Context, s *corev1.Secret, d *appsv1.Deployment, hash string) error {
	since := sinceNone
	older, err := m.mayHoldOlder(ctx, s, d, hash)
	if err != nil {
		return err
	}
	if older {
		at, err := m.apiserverNow(ctx, s)
		if err != nil {
			return err
		}
		since = at.UTC().Format(time.RFC3339)
	}
	s = s.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationTrustHash] = hash
	s.Annotations[AnnotationTrustSince] = since
	_, err = m.api.Secrets.Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		m.log.Info("webhook certificate secret changed while recording kube-scheduler's trust; checking again", "secret", s.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("record kube-scheduler's trust on secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if since != sinceNone {
		m.log.Info("kube-scheduler pods created before the new TLS files will be replaced", "hash", hash, "since", since)
	}
	return nil
}

// mayHoldOlder says whether a kube-scheduler pod may hold files other
// than hash names. A recorded hash that differs says so. Without one (at
// install, after the Secret was replaced or its record removed, after an
// upgrade from a release that kept none) a pod whose container has
// started holds what the Secret held then, unless it carries hash in
// AnnotationTrustHash (set on its template by v0.1.0); a pod that never
// started waits for the Secret's keys (the Deployment's volume names
// them) and reads them when it does.
func (m *Manager) mayHoldOlder(ctx context.Context, s *corev1.Secret, d *appsv1.Deployment, hash string) (bool, error) {
	if have := s.Annotations[AnnotationTrustHash]; have != "" && have != hash {
		return true, nil
	}
	pods, err := m.schedulerPods(ctx, d)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if started(p) && p.Annotations[AnnotationTrustHash] != hash {
			return true, nil
		}
	}
	return false, nil
}

// apiserverNow is the apiserver's clock, to the second: the time it
// stamps on a change of s run as a dry run, which goes through the whole
// write path and stores nothing.
func (m *Manager) apiserverNow(ctx context.Context, s *corev1.Secret) (time.Time, error) {
	probe := s.DeepCopy()
	if probe.Annotations == nil {
		probe.Annotations = map[string]string{}
	}
	// A value it never had, so that the write changes a field and the
	// apiserver stamps it.
	probe.Annotations[AnnotationTrustSince] = "probe " + strconv.FormatInt(m.now().UnixNano(), 10)
	out, err := m.api.Secrets.Secrets(s.Namespace).Update(ctx, probe, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return time.Time{}, fmt.Errorf("read the apiserver's clock (a dry-run write of secret %s/%s): %w", s.Namespace, s.Name, err)
	}
	at, ok := lastWrite(out)
	if !ok {
		return time.Time{}, fmt.Errorf("secret %s/%s: the apiserver stamped no write time (managedFields), so which kube-scheduler pods read it is unknown", s.Namespace, s.Name)
	}
	return at, nil
}

// replaceOlderPods deletes one kube-scheduler pod created at or before
// since. A pod that is not ready goes first; a ready one only while no
// pod terminates and every other is ready, so at most one replica is
// down at a time, as a rolling update with no surge would have it.
func (m *Manager) replaceOlderPods(ctx context.Context, d *appsv1.Deployment, since time.Time, hash string) (pending bool, err error) {
	pods, err := m.schedulerPods(ctx, d)
	if err != nil {
		return false, err
	}
	var older []*corev1.Pod
	ready := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			return true, nil // wait for it to go
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
		return len(older) > 0, nil
	}
	uid := victim.UID
	err = m.api.Pods.Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("restart kube-scheduler: delete pod %s/%s, which predates its new TLS files: %w", victim.Namespace, victim.Name, err)
	}
	m.log.Info("kube-scheduler pod deleted to read its new TLS files", "pod", victim.Name, "created", victim.CreationTimestamp.UTC().Format(time.RFC3339), "hash", hash)
	return true, nil
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

// schedulerPods are the pods of d that run or may run kube-scheduler:
// those its ReplicaSets control (not a mirror pod a node's kubelet could
// write with the same labels), and not one that failed or completed.
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
		p := &list.Items[i]
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.Kind != "ReplicaSet" || !strings.HasPrefix(ref.Name, d.Name+"-") {
			continue
		}
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// trustRecord reads what the manager recorded on s: whether it is for
// hash, and since when the Secret holds it (zero for sinceNone). A record
// without its time, as an edit can leave it, is no record.
func trustRecord(s *corev1.Secret, hash string) (since time.Time, recorded bool, err error) {
	v, ok := s.Annotations[AnnotationTrustSince]
	if s.Annotations[AnnotationTrustHash] != hash || !ok {
		return time.Time{}, false, nil
	}
	if v == sinceNone {
		return time.Time{}, true, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("secret %s/%s: annotation %s=%q is neither %q nor an RFC 3339 time: %w", s.Namespace, s.Name, AnnotationTrustSince, v, sinceNone, err)
	}
	return t, true, nil
}

// lastWrite is the newest time the apiserver stamped on a write of s.
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

// started says a container of p has run, so read the files it mounts.
func started(p *corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil || c.State.Terminated != nil || c.LastTerminationState.Terminated != nil || c.RestartCount > 0 {
			return true
		}
	}
	return false
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
