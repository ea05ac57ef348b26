// Package certs keeps the leader's TLS: a self-signed CA, a serving
// certificate for the Service (trusted by the apiserver through the
// webhook's caBundle, and by kube-scheduler), and the client certificate
// kube-scheduler presents to the extender, all stored in one Secret.
//
// The certificate logic (this file) is pure: the time is passed in, so expiry
// and renewal are tested without a clock or a cluster. Manager does the I/O.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// clockSkew backdates NotBefore so a node whose clock runs a little behind
// still accepts a certificate issued a moment ago.
const clockSkew = 5 * time.Minute

// KeyPair is a PEM-encoded certificate and its private key.
type KeyPair struct {
	Cert []byte
	Key  []byte
}

// DNSNames are the names the apiserver and kube-scheduler may use to reach
// service in namespace.
func DNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// GenerateCA makes a self-signed CA valid from at for validity.
func GenerateCA(at time.Time, validity time.Duration) (KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "vgpud-ca"},
		NotBefore:             at.Add(-clockSkew),
		NotAfter:              at.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return issue(tmpl, nil, nil)
}

// GenerateServing makes a serving certificate for dnsNames, signed by ca,
// valid from at for validity but never past the CA's own expiry.
func GenerateServing(ca KeyPair, dnsNames []string, at time.Time, validity time.Duration) (KeyPair, error) {
	if len(dnsNames) == 0 {
		return KeyPair{}, errors.New("serving certificate: no DNS names")
	}
	return issueLeaf(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		DNSNames:    dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, at, validity)
}

// GenerateClient makes a client certificate for commonName, signed by ca,
// valid from at for validity but never past the CA's own expiry: what
// kube-scheduler presents to the extender.
func GenerateClient(ca KeyPair, commonName string, at time.Time, validity time.Duration) (KeyPair, error) {
	return issueLeaf(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, at, validity)
}

// issueLeaf signs tmpl by ca, valid from at (less the clock skew) for
// validity but never past the CA's own expiry.
func issueLeaf(ca KeyPair, tmpl *x509.Certificate, at time.Time, validity time.Duration) (KeyPair, error) {
	caCert, caKey, err := parse(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("read CA: %w", err)
	}
	tmpl.NotBefore = at.Add(-clockSkew)
	tmpl.NotAfter = at.Add(validity)
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	return issue(tmpl, caCert, caKey)
}

// issue signs tmpl with a fresh P-256 key, by parent (self-signed when nil).
func issue(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate serial: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encode key: %w", err)
	}
	return KeyPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// CertCheck says whether a certificate can be kept, and if not, why.
type CertCheck struct {
	Keep   bool
	Reason string
}

func keep() CertCheck { return CertCheck{Keep: true} }

func replace(format string, a ...any) CertCheck {
	return CertCheck{Reason: fmt.Sprintf(format, a...)}
}

func renewAt(c *x509.Certificate, renewBefore time.Duration) time.Time {
	return c.NotAfter.Add(-renewBefore)
}

// CheckCA says whether ca can keep signing at time at: a parseable CA whose
// key matches and that is not within renewBefore of expiry.
func CheckCA(ca KeyPair, at time.Time, renewBefore time.Duration) CertCheck {
	cert, _, err := parse(ca)
	if err != nil {
		return replace("CA: %v", err)
	}
	if !cert.IsCA {
		return replace("CA: %q is not a CA certificate", cert.Subject.CommonName)
	}
	return checkTimes("CA", cert, at, renewBefore)
}

// CheckServing says whether pair can keep serving dnsNames at time at: it
// parses, its key matches, ca signed it, it covers every name, and it is not
// within renewBefore of expiry.
func CheckServing(caCert []byte, pair KeyPair, dnsNames []string, at time.Time, renewBefore time.Duration) CertCheck {
	const what = "serving certificate"
	cert, v := signedBy(what, caCert, pair, x509.ExtKeyUsageServerAuth)
	if cert == nil {
		return v
	}
	for _, n := range dnsNames {
		if err := cert.VerifyHostname(n); err != nil {
			return replace("%s does not cover DNS name %q", what, n)
		}
	}
	return checkTimes(what, cert, at, renewBefore)
}

// CheckClient says whether pair can keep authenticating commonName at time
// at: it parses, its key matches, ca signed it for client use, it names
// commonName, and it is not within renewBefore of expiry.
func CheckClient(caCert []byte, pair KeyPair, commonName string, at time.Time, renewBefore time.Duration) CertCheck {
	const what = "client certificate"
	cert, v := signedBy(what, caCert, pair, x509.ExtKeyUsageClientAuth)
	if cert == nil {
		return v
	}
	if cert.Subject.CommonName != commonName {
		return replace("%s names %q, not %q", what, cert.Subject.CommonName, commonName)
	}
	return checkTimes(what, cert, at, renewBefore)
}

// signedBy parses pair and checks that caCert signed it for usage; on
// failure the certificate is nil and the verdict says why.
func signedBy(what string, caCert []byte, pair KeyPair, usage x509.ExtKeyUsage) (*x509.Certificate, CertCheck) {
	cert, _, err := parse(pair)
	if err != nil {
		return nil, replace("%s: %v", what, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caCert) {
		return nil, replace("CA certificate: no PEM certificate")
	}
	// Verify at a moment inside the validity window so this checks only the
	// chain; the times are judged by the caller with their own reasons.
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: cert.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{usage}}
	if _, err := cert.Verify(opts); err != nil {
		return nil, replace("%s is not signed by the CA: %v", what, err)
	}
	return cert, keep()
}

func checkTimes(what string, c *x509.Certificate, at time.Time, renewBefore time.Duration) CertCheck {
	switch {
	case at.Before(c.NotBefore):
		return replace("%s is not valid until %s", what, c.NotBefore.UTC().Format(time.RFC3339))
	case !at.Before(c.NotAfter):
		return replace("%s expired at %s", what, c.NotAfter.UTC().Format(time.RFC3339))
	case !at.Before(renewAt(c, renewBefore)):
		return replace("%s expires at %s, within the renewal window of %s", what, c.NotAfter.UTC().Format(time.RFC3339), renewBefore)
	}
	return keep()
}

// RenewAt is when the certificate in pem falls into its renewal window.
func RenewAt(certPEM []byte, renewBefore time.Duration) (time.Time, error) {
	c, err := parseCert(certPEM)
	if err != nil {
		return time.Time{}, err
	}
	return renewAt(c, renewBefore), nil
}

// parse reads a pair and checks that the key belongs to the certificate.
func parse(p KeyPair) (*x509.Certificate, crypto.Signer, error) {
	cert, err := parseCert(p.Cert)
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("key does not match certificate: %w", err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key of type %T cannot sign", pair.PrivateKey)
	}
	return cert, signer, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return c, nil
}

// Equal reports whether two pairs hold the same bytes.
func (p KeyPair) Equal(o KeyPair) bool {
	return bytes.Equal(p.Cert, o.Cert) && bytes.Equal(p.Key, o.Key)
}
