package certs

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const (
	validity    = 365 * 24 * time.Hour
	renewBefore = 30 * 24 * time.Hour
)

func mustCA(t *testing.T, at time.Time, d time.Duration) KeyPair {
	t.Helper()
	ca, err := GenerateCA(at, d)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustServing(t *testing.T, ca KeyPair, names []string, at time.Time, d time.Duration) KeyPair {
	t.Helper()
	p, err := GenerateServing(ca, names, at, d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDNSNames(t *testing.T) {
	got := strings.Join(DNSNames("vgpud", "vgpud-system"), " ")
	want := "vgpud vgpud.vgpud-system vgpud.vgpud-system.svc vgpud.vgpud-system.svc.cluster.local"
	if got != want {
		t.Fatalf("DNSNames = %q, want %q", got, want)
	}
}

func TestCheckServing(t *testing.T) {
	names := DNSNames("vgpud", "vgpud-system")
	ca := mustCA(t, t0, 10*validity)
	otherCA := mustCA(t, t0, 10*validity)
	fresh := mustServing(t, ca, names, t0, validity)
	tests := []struct {
		name   string
		pair   KeyPair
		names  []string
		at     time.Time
		keep   bool
		reason string
	}{
		{"fresh", fresh, names, t0, true, ""},
		{"half way", fresh, names, t0.Add(validity / 2), true, ""},
		{"near expiry renews", fresh, names, t0.Add(validity - renewBefore + time.Minute), false, "within the renewal window"},
		{"expired", fresh, names, t0.Add(validity + time.Hour), false, "expired at 2027-01-01T12:00:00Z"},
		{"not yet valid", fresh, names, t0.Add(-time.Hour), false, "not valid until"},
		{"wrong DNS name", fresh, append(names, "vgpud.other.svc"), t0, false, `does not cover DNS name "vgpud.other.svc"`},
		{"other CA", mustServing(t, otherCA, names, t0, validity), names, t0, false, "not signed by the CA"},
		{"key of another cert", KeyPair{Cert: fresh.Cert, Key: ca.Key}, names, t0, false, "key does not match"},
		{"garbage", KeyPair{Cert: []byte("nope"), Key: fresh.Key}, names, t0, false, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := CheckServing(ca.Cert, tt.pair, tt.names, tt.at, renewBefore)
			if v.Keep != tt.keep || !strings.Contains(v.Reason, tt.reason) {
				t.Fatalf("CheckServing = %+v, want keep=%v reason containing %q", v, tt.keep, tt.reason)
			}
		})
	}
}

func TestCheckCA(t *testing.T) {
	ca := mustCA(t, t0, 10*validity)
	if v := CheckCA(ca, t0, renewBefore); !v.Keep {
		t.Fatalf("fresh CA: %+v", v)
	}
	if v := CheckCA(ca, t0.Add(10*validity-time.Hour), renewBefore); v.Keep || !strings.Contains(v.Reason, "renewal window") {
		t.Fatalf("CA near expiry: %+v", v)
	}
	serving := mustServing(t, ca, []string{"a"}, t0, validity)
	if v := CheckCA(serving, t0, renewBefore); v.Keep || !strings.Contains(v.Reason, "not a CA") {
		t.Fatalf("serving cert as CA: %+v", v)
	}
}

func TestGenerateServing(t *testing.T) {
	names := DNSNames("svc", "ns")
	ca := mustCA(t, t0, 2*validity)
	p := mustServing(t, ca, names, t0, validity)
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	c := pair.Leaf
	if c == nil {
		if c, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			t.Fatal(err)
		}
	}
	if !c.NotAfter.Equal(t0.Add(validity)) || c.IsCA || len(c.DNSNames) != 4 {
		t.Fatalf("serving cert: notAfter %s isCA %v names %v", c.NotAfter, c.IsCA, c.DNSNames)
	}
	// A TLS client that trusts only the CA accepts it for the Service name.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "svc.ns.svc", CurrentTime: t0}); err != nil {
		t.Fatalf("verify: %v", err)
	}

	// Never outlives its CA.
	short := mustCA(t, t0, time.Hour)
	p = mustServing(t, short, names, t0, validity)
	at, err := RenewAt(p.Cert, 0)
	if err != nil || !at.Equal(t0.Add(time.Hour)) {
		t.Fatalf("serving cert under a 1h CA ends at %s (%v), want %s", at, err, t0.Add(time.Hour))
	}

	if _, err := GenerateServing(ca, nil, t0, validity); err == nil {
		t.Fatal("no DNS names: want an error")
	}
	if _, err := GenerateServing(KeyPair{Cert: ca.Cert}, names, t0, validity); err == nil {
		t.Fatal("CA without key: want an error")
	}
}
