package podevents

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A note over events.k8s.io's limit would lose the Event: it is cut, on a
// rune boundary.
func TestTruncateKeepsNotesWithinTheLimit(t *testing.T) {
	if got := truncate("short", maxNote); got != "short" {
		t.Errorf("short note changed: %q", got)
	}
	long := strings.Repeat("GPU-é", 400)
	got := truncate(long, maxNote)
	if len(got) > maxNote || !utf8.ValidString(got) || !strings.HasSuffix(got, " ...") {
		t.Errorf("cut to %d bytes, valid %v: %q", len(got), utf8.ValidString(got), got[len(got)-10:])
	}
}
