package certs

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// plan decides what the Secret s (nil when absent) should hold. rolled
// says kube-scheduler runs with what s holds: a CA rotation takes its
// next step only then.
func (m *Manager) plan(s *corev1.Secret, rolled bool) (b bundle, changed bool, err error) {
	at := m.now()
	names := DNSNames(m.cfg.ServiceName, m.cfg.Namespace)
	var asked string
	if s != nil {
		b.trust, b.phase = readTrust(s.Data[KeyCACert], s.Data[KeyCAKey], s.Data[KeyCANextKey])
		b.serving = KeyPair{Cert: s.Data[KeyCert], Key: s.Data[KeyKey]}
		b.client = KeyPair{Cert: s.Data[KeyClientCert], Key: s.Data[KeyClientKey]}
		b.rotated = s.Annotations[AnnotationRotatedCA]
		if v := s.Annotations[AnnotationRotateCA]; v != "" && v != b.rotated {
			asked = v
		}
	} else {
		b.phase = broken
	}
	// An empty Secret (as the manifest creates it) is a first start, not a
	// fault worth a log line.
	say := func(msg string, args ...any) {
		if s != nil && len(s.Data) > 0 {
			m.log.Info(msg, args...)
		}
	}
	newCA := func() (KeyPair, error) {
		ca, err := GenerateCA(at, caValidityFactor*m.cfg.CertValidity)
		if err != nil {
			return KeyPair{}, fmt.Errorf("generate CA: %w", err)
		}
		return ca, nil
	}
	switch v := CheckCA(b.trust.signer, at, 0); {
	case b.phase == broken || !v.Keep:
		// Nothing valid to overlap with: a fresh CA, trusted at once.
		reason := v.Reason
		if v.Keep {
			reason = "ca.crt, ca.key and " + KeyCANextKey + " do not form a CA or a rotation step"
		}
		say("new CA", "reason", reason)
		ca, err := newCA()
		if err != nil {
			return b, false, err
		}
		b.trust, b.phase, changed = trust{bundle: [][]byte{ca.Cert}, signer: ca}, steady, true
		if asked != "" {
			b.rotated = asked
		}
	case b.phase == steady && caDue(b.trust.signer, at, m.cfg.CertRenewBefore, asked != ""):
		next, err := newCA()
		if err != nil {
			return b, false, err
		}
		b.trust.bundle = append(b.trust.bundle, next.Cert)
		b.trust.next, b.phase, changed = next, introducing, true
		if asked != "" {
			b.rotated = asked
		}
		m.log.Info("CA rotation: new CA trusted beside the old; waiting for kube-scheduler to restart with both", "asked", asked)
	case b.phase == introducing && rolled:
		b.trust.signer, b.trust.next, b.phase, changed = b.trust.next, KeyPair{}, switched, true
		m.log.Info("CA rotation: kube-scheduler trusts the new CA; certificates now signed by it")
	case b.phase == switched && rolled:
		b.trust.bundle, b.phase, changed = [][]byte{b.trust.signer.Cert}, steady, true
		m.log.Info("CA rotation: kube-scheduler holds the new certificates; old CA retired")
	}
	if v := CheckServing(b.trust.signer.Cert, b.serving, names, at, m.cfg.CertRenewBefore); !v.Keep {
		say("new serving certificate", "reason", v.Reason)
		if b.serving, err = GenerateServing(b.trust.signer, names, at, m.cfg.CertValidity); err != nil {
			return b, false, fmt.Errorf("generate serving certificate: %w", err)
		}
		changed = true
	}
	if v := CheckClient(b.trust.signer.Cert, b.client, ClientName, at, m.cfg.CertRenewBefore); !v.Keep {
		say("new kube-scheduler client certificate", "reason", v.Reason)
		if b.client, err = GenerateClient(b.trust.signer, ClientName, at, m.cfg.CertValidity); err != nil {
			return b, false, fmt.Errorf("generate client certificate: %w", err)
		}
		changed = true
	}
	return b, changed, nil
}

func setRotated(s *corev1.Secret, rotated string) {
	if rotated == "" {
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationRotatedCA] = rotated
}
