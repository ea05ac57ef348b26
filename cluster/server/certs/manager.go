package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Keys of the Secret. tls.crt and tls.key follow kubernetes.io/tls; the
// kube-scheduler mounts ca.crt to trust the extender.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	KeyCert   = corev1.TLSCertKey
	KeyKey    = corev1.TLSPrivateKeyKey
)

// caValidityFactor makes the CA outlive many serving certificates, so the
// caBundle and the kube-scheduler's mounted ca.crt rarely change.
const caValidityFactor = 10

// Config says where the certificate lives and how long it lasts.
type Config struct {
	Namespace   string // the leader's namespace; the Service and Secret live there (filled at run time)
	SecretName  string
	WebhookName string // MutatingWebhookConfiguration whose caBundle is kept
	ServiceName string
	Validity    time.Duration // of the serving certificate
	RenewBefore time.Duration // renew this long before expiry
	// Recheck bounds the wait between checks, which also repairs a caBundle
	// that `kubectl apply` reset. Zero means one minute.
	Recheck time.Duration
}

// DefaultConfig is what vgpud runs with when no flag is given; the
// names match manifests/vgpud.yaml.
func DefaultConfig() Config {
	return Config{
		SecretName:  "vgpud-tls",
		WebhookName: "vgpud",
		ServiceName: "vgpud",
		Validity:    365 * 24 * time.Hour,
		RenewBefore: 30 * 24 * time.Hour,
	}
}

// Manager keeps a valid serving certificate in the Secret, its CA in the
// webhook's caBundle, and the certificate in memory for GetCertificate.
type Manager struct {
	cfg  Config
	kube kubernetes.Interface
	log  *slog.Logger
	now  func() time.Time
	cert atomic.Pointer[loaded]
}

type loaded struct {
	tls      *tls.Certificate
	pair     KeyPair
	notAfter time.Time
}

// NewManager returns a Manager; now is the clock (time.Now outside tests).
func NewManager(cfg Config, kube kubernetes.Interface, log *slog.Logger, now func() time.Time) *Manager {
	if cfg.Recheck <= 0 {
		cfg.Recheck = time.Minute
	}
	return &Manager{cfg: cfg, kube: kube, log: log, now: now}
}

// GetCertificate serves the current certificate; plug it into tls.Config so
// a renewed certificate is used without a restart.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l := m.cert.Load()
	if l == nil {
		return nil, errors.New("webhook serving certificate not loaded yet")
	}
	return l.tls, nil
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
		case <-time.After(wait):
		}
	}
}

// Ensure makes the Secret hold a valid CA and serving certificate, the
// webhook trust that CA, and loads the certificate. It returns when the
// certificate is next due for renewal.
func (m *Manager) Ensure(ctx context.Context) (time.Time, error) {
	ca, serving, err := m.ensureSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if err := m.ensureCABundle(ctx, ca.Cert); err != nil {
		return time.Time{}, err
	}
	if err := m.load(serving); err != nil {
		return time.Time{}, err
	}
	return RenewAt(serving.Cert, m.cfg.RenewBefore)
}

func (m *Manager) load(p KeyPair) error {
	if l := m.cert.Load(); l != nil && l.pair.Equal(p) {
		return nil
	}
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	end, err := RenewAt(p.Cert, 0)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	m.cert.Store(&loaded{tls: &c, pair: p, notAfter: end})
	m.log.Info("webhook serving certificate loaded", "expires", end.UTC().Format(time.RFC3339))
	return nil
}

// ensureSecret reads the Secret and replaces what is not valid. Another
// leader may write it at the same time: a lost create or update is answered
// by reading again and judging what the other wrote.
func (m *Manager) ensureSecret(ctx context.Context) (ca, serving KeyPair, err error) {
	secrets := m.kube.CoreV1().Secrets(m.cfg.Namespace)
	name := m.cfg.SecretName
	for attempt := 0; attempt < 5; attempt++ {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			s = nil
		} else if err != nil {
			return KeyPair{}, KeyPair{}, fmt.Errorf("read secret %s/%s: %w", m.cfg.Namespace, name, err)
		}
		ca, serving, changed, err := m.plan(s)
		if err != nil {
			return KeyPair{}, KeyPair{}, err
		}
		if !changed {
			return ca, serving, nil
		}
		data := map[string][]byte{KeyCACert: ca.Cert, KeyCAKey: ca.Key, KeyCert: serving.Cert, KeyKey: serving.Key}
		if s == nil {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.cfg.Namespace, Labels: map[string]string{"app.kubernetes.io/name": "vgpud"}},
				Type:       corev1.SecretTypeOpaque,
				Data:       data,
			}, metav1.CreateOptions{})
		} else {
			s = s.DeepCopy()
			s.Data = data
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			return ca, serving, nil
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			m.log.Info("webhook certificate secret written by another replica; reading it again", "secret", name)
			continue
		default:
			return KeyPair{}, KeyPair{}, fmt.Errorf("write secret %s/%s: %w", m.cfg.Namespace, name, err)
		}
	}
	return KeyPair{}, KeyPair{}, fmt.Errorf("write secret %s/%s: still racing with another writer after 5 attempts", m.cfg.Namespace, name)
}

// plan decides what the Secret s (nil when absent) should hold.
func (m *Manager) plan(s *corev1.Secret) (ca, serving KeyPair, changed bool, err error) {
	at := m.now()
	names := DNSNames(m.cfg.ServiceName, m.cfg.Namespace)
	if s != nil {
		ca = KeyPair{Cert: s.Data[KeyCACert], Key: s.Data[KeyCAKey]}
		serving = KeyPair{Cert: s.Data[KeyCert], Key: s.Data[KeyKey]}
	}
	if v := CheckCA(ca, at, m.cfg.RenewBefore); !v.Keep {
		if s != nil {
			m.log.Info("new webhook CA", "reason", v.Reason)
		}
		if ca, err = GenerateCA(at, caValidityFactor*m.cfg.Validity); err != nil {
			return ca, serving, false, fmt.Errorf("generate webhook CA: %w", err)
		}
		changed = true
	}
	if v := CheckServing(ca.Cert, serving, names, at, m.cfg.RenewBefore); !v.Keep {
		if s != nil && !changed {
			m.log.Info("new webhook serving certificate", "reason", v.Reason)
		}
		if serving, err = GenerateServing(ca, names, at, m.cfg.Validity); err != nil {
			return ca, serving, false, fmt.Errorf("generate webhook serving certificate: %w", err)
		}
		changed = true
	}
	return ca, serving, changed, nil
}

// ensureCABundle makes every webhook of our MutatingWebhookConfiguration
// trust caCert. A missing configuration is logged, not fatal: the extender
// on the same listener still works, and Run checks again.
func (m *Manager) ensureCABundle(ctx context.Context, caCert []byte) error {
	mwcs := m.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mwc, err := mwcs.Get(ctx, m.cfg.WebhookName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			m.log.Warn("MutatingWebhookConfiguration not found; pods will not be mutated until it exists", "name", m.cfg.WebhookName)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read MutatingWebhookConfiguration %s: %w", m.cfg.WebhookName, err)
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
			return fmt.Errorf("set caBundle of MutatingWebhookConfiguration %s: %w", m.cfg.WebhookName, err)
		}
		m.log.Info("webhook caBundle set", "name", m.cfg.WebhookName)
		return nil
	})
}
