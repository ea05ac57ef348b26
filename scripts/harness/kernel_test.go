//vgpud:wallclock a voluntary context switch is counted only when the thread truly sleeps in the kernel.

package harness

import (
	"os"
	"testing"
	"time"
)

// ReadKernel sees this process's own page faults and sleeps: touching
// fresh pages faults, and each sleep is a voluntary switch.
func TestReadKernelCountsFaultsAndSwitches(t *testing.T) {
	pid := os.Getpid()
	before, err := ReadKernel(pid)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	for range 5 {
		time.Sleep(time.Millisecond)
	}
	after, err := ReadKernel(pid)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.MinorFaults < 100 {
		t.Errorf("16 MiB of fresh pages touched, %d minor faults counted", d.MinorFaults)
	}
	if d.Switches < 1 {
		t.Errorf("five sleeps, %d context switches counted", d.Switches)
	}
	if d.User < 0 || d.System < 0 {
		t.Errorf("CPU went backwards: %+v", d)
	}
}
