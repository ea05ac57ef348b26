package harness

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// CPUTime counts a busy spell of this process to within a tick, where
// the tick clock alone would read 0 to 20 ms of it. The spell is 30 ms of
// CPU by getrusage, not of the wall clock: on a loaded machine (make test
// runs packages side by side) 30 ms of wall clock can be 12 ms of CPU.
func TestCPUTimeCountsABusySpell(t *testing.T) {
	pid := os.Getpid()
	if _, ok := schedCPU(pid); !ok {
		t.Skip("this kernel keeps no schedstat; CPUTime falls back to ticks")
	}
	before := CPUTime(pid)
	used0 := rusageCPU(t)
	spin := 0
	for start := time.Now(); rusageCPU(t)-used0 < 30*time.Millisecond; {
		spin++
		if time.Since(start) > time.Minute {
			t.Fatal("30 ms of CPU not used in a minute")
		}
	}
	got := CPUTime(pid) - before
	if got < 20*time.Millisecond || got > 5*time.Second {
		t.Errorf("30 ms busy by getrusage (%d spins) counted as %v", spin, got)
	}
}

// rusageCPU is this process's user and system time by getrusage.
func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
