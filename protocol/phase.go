package protocol

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Phase is the value of wellknown.AnnotationPhase: "bound" (leader, before the
// Binding), then "allocated" or "failed: <reason>" (node, in Allocate).
type Phase string

const (
	PhaseBound     Phase = "bound"
	PhaseAllocated Phase = "allocated"
	phaseFailed          = "failed"
)

// Failed builds the phase for a pod whose allocation failed.
func Failed(reason string) Phase {
	return Phase(phaseFailed + ": " + reason)
}

// IsFailed reports whether p is a failure, and its reason.
func (p Phase) IsFailed() (string, bool) {
	rest, ok := strings.CutPrefix(string(p), phaseFailed)
	if !ok || (rest != "" && rest[0] != ':') {
		return "", false
	}
	return strings.TrimSpace(strings.TrimPrefix(rest, ":")), true
}

// ParsePhase validates a wellknown.AnnotationPhase value. The empty string is no phase.
func ParsePhase(s string) (Phase, error) {
	p := Phase(s)
	switch {
	case s == "", p == PhaseBound, p == PhaseAllocated:
		return p, nil
	}
	if _, ok := p.IsFailed(); ok {
		return p, nil
	}
	return "", fmt.Errorf("%s %q: want %q, %q or \"failed: <reason>\"", wellknown.AnnotationPhase, s, PhaseBound, PhaseAllocated)
}
