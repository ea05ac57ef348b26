package certs

import "time"

// RotationObserver hears what the Manager keeps: when its certificates expire,
// and each step of a CA rotation it sees the Secret take (the metrics).
type RotationObserver interface {
	Certificates(ca, serving, client time.Time)
	RotationStep(step string)
}

// ObserveWith has o told, from the next Ensure on; call before Run.
func (m *Manager) ObserveWith(o RotationObserver) { m.observer = o }

// observe tells the observer, if any, the certificates' expiry and the
// rotation step the Secret took since the last Ensure.
func (m *Manager) observe(b bundle) {
	last := m.lastPhase
	m.lastPhase = b.phase
	if m.observer == nil {
		return
	}
	if step := rotationStep(last, b.phase); step != "" {
		m.observer.RotationStep(step)
	}
	ca, errCA := RenewAt(b.trust.signer.Cert, 0)
	serving, errServing := RenewAt(b.serving.Cert, 0)
	client, errClient := RenewAt(b.client.Cert, 0)
	if errCA == nil && errServing == nil && errClient == nil {
		m.observer.Certificates(ca, serving, client)
	}
}

// rotationStep names the step of a CA rotation from one phase to the
// next, "" for none.
func rotationStep(from, to phase) string {
	switch {
	case from == steady && to == introducing:
		return StepTrusted
	case from == introducing && to == switched:
		return StepSigning
	case from == switched && to == steady:
		return StepRetired
	}
	return ""
}

// The steps of a CA rotation, as an Observer hears them.
const (
	StepTrusted = "trusted" // the next CA trusted beside the current one
	StepSigning = "signing" // the next CA signs
	StepRetired = "retired" // the old CA is gone
)
