package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"time"
)

// A CA is replaced without an outage, in three steps, each taken only
// once kube-scheduler (which reads its files once, at start) runs with
// what the Secret held before it:
//
//	steady:      ca.crt [A],    A signs
//	introducing: ca.crt [A, B], A signs, ca-next.key holds B's key
//	switched:    ca.crt [A, B], B signs (serving and client reissued)
//	steady:      ca.crt [B],    B signs
//
// The apiserver (caBundle) and the extender (client CAs) trust ca.crt as
// a whole, so every certificate in use verifies at every step.
type phase int

const (
	steady phase = iota
	introducing
	switched
	broken // no CA that matches ca.key: start afresh
)

func (p phase) String() string {
	return [...]string{"steady", "introducing a new CA", "switched to the new CA", "broken"}[p]
}

// trust is the CA side of the Secret.
type trust struct {
	bundle [][]byte // PEM certificates in ca.crt, oldest first
	signer KeyPair  // the CA that signs: its certificate (in bundle) and ca.key
	next   KeyPair  // while introducing: the new CA and ca-next.key
}

// readTrust finds the signing CA in ca.crt, and which step of a rotation
// the Secret is at.
func readTrust(caCert, caKey, nextKey []byte) (trust, phase) {
	t := trust{bundle: splitPEM(caCert)}
	signer := -1
	for i, c := range t.bundle {
		if matches(c, caKey) {
			signer = i
			break
		}
	}
	if signer < 0 {
		return t, broken
	}
	t.signer = KeyPair{Cert: t.bundle[signer], Key: caKey}
	switch {
	case len(t.bundle) == 1 && len(nextKey) == 0:
		return t, steady
	case len(t.bundle) == 2 && signer == 0 && matches(t.bundle[1], nextKey):
		t.next = KeyPair{Cert: t.bundle[1], Key: nextKey}
		return t, introducing
	case len(t.bundle) == 2 && signer == 1 && len(nextKey) == 0:
		return t, switched
	}
	return t, broken
}

// caCert is ca.crt: every trusted CA.
func (t trust) caCert() []byte { return bytes.Join(t.bundle, nil) }

func matches(certPEM, keyPEM []byte) bool {
	if len(keyPEM) == 0 {
		return false
	}
	_, err := tls.X509KeyPair(certPEM, keyPEM)
	return err == nil
}

// splitPEM returns each PEM certificate block of b, re-encoded alone.
func splitPEM(b []byte) [][]byte {
	var out [][]byte
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		if block.Type == "CERTIFICATE" {
			out = append(out, pem.EncodeToMemory(block))
		}
	}
}

// caDue says whether a valid CA should be replaced with an overlap: it is
// within renewBefore of expiry, or an operator asked for a rotation.
func caDue(ca KeyPair, at time.Time, renewBefore time.Duration, asked bool) bool {
	if asked {
		return true
	}
	end, err := RenewAt(ca.Cert, renewBefore)
	return err != nil || !at.Before(end)
}

// TrustHash names what kube-scheduler reads from the Secret: the CAs it
// trusts and the client certificate it presents. A change of it must
// reach kube-scheduler through a restart.
func TrustHash(caCert, clientCert []byte) string {
	h := sha256.New()
	h.Write(caCert)
	h.Write([]byte{0})
	h.Write(clientCert)
	return hex.EncodeToString(h.Sum(nil))[:16]
}
