//go:build skewnext

package protocol

import (
	"strings"
	"testing"
)

// The stand-in for a newer release writes fields this release does not
// know, and this release's decoder reads the rest unchanged.
func TestNewerFieldsRoundTrip(t *testing.T) {
	s, err := EncodeAssignment(sampleAssignment())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `"next":`) || strings.Count(s, `"nextField":1`) != 2 {
		t.Fatalf("no newer fields in %s", s)
	}
	a, err := DecodeAssignment(s)
	if err != nil || len(a.Containers) != 2 || a.Node != "gpu-node-1" {
		t.Fatalf("%+v %v", a, err)
	}
}
