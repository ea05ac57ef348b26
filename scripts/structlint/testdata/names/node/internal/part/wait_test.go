//vgpud:wallclock a real process exits in the kernel's time.

package part

import (
	"testing"
	"time"
)

func TestWaits(t *testing.T) { time.Sleep(time.Millisecond) }
