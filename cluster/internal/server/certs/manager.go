package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// Keys of the Secret. tls.crt and tls.key follow kubernetes.io/tls; the
// kube-scheduler mounts ca.crt to trust the extender, and scheduler.crt
// and scheduler.key to be trusted by it.
const (
	KeyCACert     = "ca.crt"
	KeyCAKey      = "ca.key"
	KeyCert       = corev1.TLSCertKey
	KeyKey        = corev1.TLSPrivateKeyKey
	KeyClientCert = "scheduler.crt"
	KeyClientKey  = "scheduler.key"
	KeyCANextKey  = "ca-next.key" // while a new CA is introduced
)

// Annotations on the Secret: an operator sets AnnotationRotateCA to any
// new value to replace the CA now (it is otherwise replaced when it nears
// expiry); AnnotationRotatedCA records the last value acted on.
const (
	AnnotationRotateCA  = "vgpud.io/rotate-ca"
	AnnotationRotatedCA = "vgpud.io/rotated-ca"
	// AnnotationTrustHash names the CAs and client certificate
	// kube-scheduler's pods must read (TrustHash); AnnotationTrustSince is
	// when the Secret came to hold them: a pod created before then is
	// replaced. Both are the manager's own record (scheduler.go).
	AnnotationTrustHash  = "vgpud.io/tls-hash"
	AnnotationTrustSince = "vgpud.io/tls-hash-since"
)

// ClientName is the common name of the client certificate the extender
// accepts: kube-scheduler's.
const ClientName = "vgpud-scheduler"

// caValidityFactor makes the CA outlive many serving certificates, so the
// caBundle and the kube-scheduler's mounted ca.crt rarely change.
const caValidityFactor = 10

// Config says where the certificate lives and how long it lasts.
type Config struct {
	Namespace         string // the leader's namespace; the Service and Secret live there (filled at run time)
	SecretName        string
	WebhookConfigName string // MutatingWebhookConfiguration whose caBundle is kept
	ServiceName       string
	// SchedulerDeployment is kube-scheduler's Deployment in Namespace,
	// whose pods are replaced when what they read from the Secret changes
	// (each step of a CA rotation, a renewed client certificate). Empty, or absent from the
	// cluster, means a kube-scheduler vgpud does not manage: its operator
	// restarts it.
	SchedulerDeployment string
	CertValidity        time.Duration // of the serving certificate
	CertRenewBefore     time.Duration // renew this long before expiry
	// Recheck bounds the wait between checks, which also repairs a caBundle
	// that `kubectl apply` reset and notices a rotation asked for on the
	// Secret. Zero means 10 s.
	Recheck time.Duration
}

// DefaultConfig is what vgpud runs with when no flag is given; the
// names match manifests/vgpud.yaml.
func DefaultConfig() Config {
	return Config{
		SecretName:          "vgpud-tls",
		WebhookConfigName:   "vgpud",
		ServiceName:         "vgpud",
		SchedulerDeployment: "vgpud-scheduler",
		CertValidity:        365 * 24 * time.Hour,
		CertRenewBefore:     30 * 24 * time.Hour,
	}
}

// Manager keeps a valid serving certificate in the Secret, its CA in the
// webhook's caBundle, and the certificate in memory for GetCertificate.
type Manager struct {
	cfg   Config
	api   API
	log   *slog.Logger
	now   func() time.Time
	clock clock.WithTicker
	cert  atomic.Pointer[loaded]
	// loaded is closed once a certificate is: a listener that takes
	// traffic before then fails every handshake.
	loaded     chan struct{}
	loadedOnce sync.Once
	observer   RotationObserver
	lastPhase  phase // as last ensured; broken before the first
}

type loaded struct {
	tls      *tls.Certificate
	pair     KeyPair
	clients  *x509.CertPool // the CA, for verifying kube-scheduler
	notAfter time.Time
}

// bundle is what the Secret holds.
type bundle struct {
	trust           trust
	phase           phase
	serving, client KeyPair
	rotated         string // AnnotationRotatedCA
	restarting      bool   // a kube-scheduler pod is still to read it
}

// API is what the Manager reads and writes: its Secret, the webhook's
// caBundle, kube-scheduler's Deployment (read) and its pods, which it
// deletes when what they read from the Secret changes.
type API struct {
	Secrets     corev1client.SecretsGetter
	Pods        corev1client.PodsGetter
	Deployments appsv1client.DeploymentsGetter
	Webhooks    admissionregistrationv1client.MutatingWebhookConfigurationsGetter
}

// NewManager returns a Manager; clk times its checks and certificates.
func NewManager(cfg Config, api API, log *slog.Logger, clk clock.WithTicker) *Manager {
	if cfg.Recheck <= 0 {
		cfg.Recheck = 10 * time.Second
	}
	return &Manager{cfg: cfg, api: api, log: log, now: clk.Now, clock: clk, loaded: make(chan struct{}), lastPhase: broken}
}

// Loaded is closed once a serving certificate is loaded.
func (m *Manager) Loaded() <-chan struct{} { return m.loaded }

// GetCertificate serves the current certificate; plug it into tls.Config so
// a renewed certificate is used without a restart.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l := m.cert.Load()
	if l == nil {
		return nil, errors.New("webhook serving certificate not loaded yet")
	}
	return l.tls, nil
}

// WebhookTLS is the webhook listener's TLS: the current serving
// certificate, which the apiserver checks against the caBundle.
func (m *Manager) WebhookTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: m.GetCertificate}
}

// ExtenderTLS is the extender listener's TLS: the serving certificate,
// and a client certificate signed by vgpud's CA for kube-scheduler
// required of every caller, so nothing else on the pod network can call
// filter, prioritize or bind.
func (m *Manager) ExtenderTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := m.cert.Load()
			if l == nil {
				return nil, errors.New("extender certificate not loaded yet")
			}
			return &tls.Config{
				MinVersion: tls.VersionTLS12,
				// HTTP/2, as http.Server offers on its own config, which this
				// one replaces: kube-scheduler's client speaks it and then
				// keeps one connection. Over HTTP/1.1 it closed each after
				// one call, reading our answer without its trailing newline,
				// so every call paid a handshake with client certificate.
				NextProtos:   []string{"h2", "http/1.1"},
				Certificates: []tls.Certificate{*l.tls},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    l.clients,
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != ClientName {
						return fmt.Errorf("extender: client certificate is not %s's", ClientName)
					}
					return nil
				},
			}, nil
		},
	}
}

// Ready returns nil once a certificate that has not expired is loaded.
func (m *Manager) Ready() error {
	l := m.cert.Load()
	if l == nil {
		return errors.New("webhook serving certificate not loaded yet")
	}
	if !m.now().Before(l.notAfter) {
		return fmt.Errorf("webhook serving certificate expired at %s and could not be renewed", l.notAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// Run ensures the certificate now and again before it is due, until ctx
// ends. Errors are logged and retried; Run returns only ctx's error.
func (m *Manager) Run(ctx context.Context) error {
	const retryMin, retryMax = time.Second, time.Minute
	backoff := retryMin
	for {
		wait := m.cfg.Recheck
		renew, err := m.Ensure(ctx)
		if err != nil {
			m.log.Error("webhook certificate", "err", err, "retry_in", backoff)
			wait, backoff = backoff, min(2*backoff, retryMax)
		} else {
			backoff = retryMin
			if d := renew.Sub(m.now()); d < wait {
				wait = max(d, time.Second)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.clock.After(wait):
		}
	}
}

// Ensure makes the Secret hold a valid CA and serving certificate, the
// webhook trust that CA, and loads the certificate. It returns when the
// certificate is next due for renewal.
func (m *Manager) Ensure(ctx context.Context) (time.Time, error) {
	b, err := m.ensureSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if err := m.ensureCABundle(ctx, b.trust.caCert()); err != nil {
		return time.Time{}, err
	}
	if err := m.load(b.serving, b.trust.caCert()); err != nil {
		return time.Time{}, err
	}
	m.observe(b)
	if b.phase != steady || b.restarting {
		// The next step, or the next pod to replace, waits for
		// kube-scheduler's restart: look soon.
		return m.now().Add(rotationPoll), nil
	}
	ca, err := RenewAt(b.trust.signer.Cert, m.cfg.CertRenewBefore)
	if err != nil {
		return time.Time{}, err
	}
	serving, err := RenewAt(b.serving.Cert, m.cfg.CertRenewBefore)
	if err != nil {
		return time.Time{}, err
	}
	client, err := RenewAt(b.client.Cert, m.cfg.CertRenewBefore)
	if err != nil {
		return time.Time{}, err
	}
	due := serving
	for _, t := range []time.Time{ca, client} {
		if t.Before(due) {
			due = t
		}
	}
	return due, nil
}

// rotationPoll is how often a CA rotation checks on kube-scheduler's restart.
const rotationPoll = 2 * time.Second

func (m *Manager) load(p KeyPair, caCert []byte) error {
	if l := m.cert.Load(); l != nil && l.pair.Equal(p) {
		return nil
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(caCert) {
		return errors.New("load CA: no PEM certificate")
	}
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	end, err := RenewAt(p.Cert, 0)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	m.cert.Store(&loaded{tls: &c, pair: p, clients: clients, notAfter: end})
	m.loadedOnce.Do(func() { close(m.loaded) })
	m.log.Info("webhook serving certificate loaded", "expires", end.UTC().Format(time.RFC3339))
	return nil
}

// ensureSecret reads the Secret and replaces what is not valid. Another
// leader may write it at the same time: a lost create or update is answered
// by reading again and judging what the other wrote.
func (m *Manager) ensureSecret(ctx context.Context) (bundle, error) {
	secrets := m.api.Secrets.Secrets(m.cfg.Namespace)
	name := m.cfg.SecretName
	for attempt := 0; attempt < 5; attempt++ {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			s = nil
		} else if err != nil {
			return bundle{}, fmt.Errorf("read secret %s/%s: %w", m.cfg.Namespace, name, err)
		}
		rolled, err := m.schedulerRunsWith(ctx, s)
		if err != nil {
			return bundle{}, err
		}
		b, changed, err := m.plan(s, rolled)
		if err != nil {
			return bundle{}, err
		}
		if !changed {
			b.restarting, err = m.restartScheduler(ctx, s, b)
			return b, err
		}
		data := map[string][]byte{KeyCACert: b.trust.caCert(), KeyCAKey: b.trust.signer.Key, KeyCert: b.serving.Cert, KeyKey: b.serving.Key,
			KeyClientCert: b.client.Cert, KeyClientKey: b.client.Key}
		if len(b.trust.next.Key) > 0 {
			data[KeyCANextKey] = b.trust.next.Key
		}
		if s == nil {
			s = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.cfg.Namespace, Labels: map[string]string{"app.kubernetes.io/name": "vgpud"}},
				Type:       corev1.SecretTypeOpaque,
			}
			setRotated(s, b.rotated)
			s.Data = data
			s, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			s = s.DeepCopy()
			setRotated(s, b.rotated)
			s.Data = data
			s, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			b.restarting, err = m.restartScheduler(ctx, s, b)
			return b, err
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			m.log.Info("webhook certificate secret written by another replica; reading it again", "secret", name)
			continue
		default:
			return bundle{}, fmt.Errorf("write secret %s/%s: %w", m.cfg.Namespace, name, err)
		}
	}
	return bundle{}, fmt.Errorf("write secret %s/%s: still racing with another writer after 5 attempts", m.cfg.Namespace, name)
}

// ensureCABundle makes every webhook of our MutatingWebhookConfiguration
// trust caCert. A missing configuration is logged, not fatal: the extender
// on the same listener still works, and Run checks again.
func (m *Manager) ensureCABundle(ctx context.Context, caCert []byte) error {
	mwcs := m.api.Webhooks.MutatingWebhookConfigurations()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mwc, err := mwcs.Get(ctx, m.cfg.WebhookConfigName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			m.log.Warn("MutatingWebhookConfiguration not found; pods will not be mutated until it exists", "name", m.cfg.WebhookConfigName)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read MutatingWebhookConfiguration %s: %w", m.cfg.WebhookConfigName, err)
		}
		changed := false
		for i := range mwc.Webhooks {
			if !bytes.Equal(mwc.Webhooks[i].ClientConfig.CABundle, caCert) {
				mwc.Webhooks[i].ClientConfig.CABundle = caCert
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if _, err := mwcs.Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("set caBundle of MutatingWebhookConfiguration %s: %w", m.cfg.WebhookConfigName, err)
		}
		m.log.Info("webhook caBundle set", "name", m.cfg.WebhookConfigName)
		return nil
	})
}
