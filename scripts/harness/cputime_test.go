package harness

import (
	"os"
	"testing"
	"time"
)

// CPUTime counts a busy spell of this process to within a tick, where
// the tick clock alone would read 0 to 20 ms of it.
func TestCPUTimeCountsABusySpell(t *testing.T) {
	pid := os.Getpid()
	if _, ok := schedCPU(pid); !ok {
		t.Skip("this kernel keeps no schedstat; CPUTime falls back to ticks")
	}
	before := CPUTime(pid)
	spin := 0
	for start := time.Now(); time.Since(start) < 30*time.Millisecond; {
		spin++
	}
	got := CPUTime(pid) - before
	if got < 20*time.Millisecond || got > 5*time.Second {
		t.Errorf("30 ms busy (%d spins) counted as %v", spin, got)
	}
}
