//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scraper is the ServiceAccount the tests scrape vgpud's metrics as, bound
// to the manifest's vgpud-metrics-reader ClusterRole as a Prometheus is.
const scraper = "e2e-prometheus"

// metricsAudience is the audience a scraper's token is made for, as
// manifests/monitoring/scrape.yaml asks for it: the suite checks vgpud
// against the contract users read, not against vgpud's own constant.
const metricsAudience = "vgpud-metrics"

// scraperToken is a fresh token of the scraper, which it makes if need be.
func (e env) scraperToken() (string, error) {
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scraper, Namespace: system}}
	if _, err := e.kube.CoreV1().ServiceAccounts(system).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: scraper},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "vgpud-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: scraper, Namespace: system}},
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	secs := int64(3600)
	// Made for vgpud's metrics alone, as the manifest tells a Prometheus.
	tr, err := e.kube.CoreV1().ServiceAccounts(system).CreateToken(ctx, scraper, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: &secs, Audiences: []string{metricsAudience}}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// scrapeAs reads pod's /metrics over HTTPS from the pod network, as a
// Prometheus does, with token ("" sends none); the error carries the
// answer's status and body when it is not 200.
func (e env) scrapeAs(pod *corev1.Pod, token string) (string, error) {
	args := []string{"--net=/var/run/netns/vgpud-e2e", "curl", "-sk", "--max-time", "10", "-w", "\n%{http_code}"}
	if token != "" {
		args = append(args, "-H", "Authorization: Bearer "+token)
	}
	out, err := exec.Command("nsenter", append(args, fmt.Sprintf("https://%s:9090/metrics", pod.Status.PodIP))...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w: %s", pod.Name, err, out)
	}
	body, code := string(out), ""
	if i := strings.LastIndex(body, "\n"); i >= 0 {
		body, code = body[:i], body[i+1:]
	}
	if code != "200" {
		return "", fmt.Errorf("scrape %s: HTTP %s: %s", pod.Name, code, strings.TrimSpace(body))
	}
	return body, nil
}

// scrape reads pod's /metrics as the scraper.
func (e env) scrape(pod *corev1.Pod) (string, error) {
	token, err := e.scraperToken()
	if err != nil {
		return "", fmt.Errorf("scraper token: %w", err)
	}
	return e.scrapeAs(pod, token)
}
