//go:build bench

package bench

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/scripts/harness"
)

// abRounds compares the leader as built with a variant, in rounds that
// alternate between them (four each), when VGPUD_BENCH_AB_ENV (one
// NAME=value for the variant's process, GOMAXPROCS=2 say) or
// VGPUD_BENCH_AB_BIN (another vgpud) is set; otherwise it does nothing.
// The CPU a pod costs on this machine moves by a third from one run to
// the next, and by less within minutes: one run of each side apart says
// little, alternating rounds side by side do. It logs each round's CPU
// per pod and records no row; it returns the leader left running, the
// build's own.
func (e *env) abRounds(t *testing.T, c *http.Client, leader *harness.Process, fill int) *harness.Process {
	variantEnv, variantBin := os.Getenv("VGPUD_BENCH_AB_ENV"), os.Getenv("VGPUD_BENCH_AB_BIN")
	if variantEnv == "" && variantBin == "" {
		return leader
	}
	name, value, ok := strings.Cut(variantEnv, "=")
	if variantEnv != "" && !ok {
		t.Fatalf("VGPUD_BENCH_AB_ENV=%q: want NAME=value", variantEnv)
	}
	built := e.vgpud
	var sums [2]float64
	for k := range 9 { // the last round is the build's, so it is left running
		variant := k%2 == 1
		if variant {
			if variantBin != "" {
				e.vgpud = variantBin
			}
			if name != "" {
				t.Setenv(name, value)
			}
		}
		leader = e.reelect(t, c, leader)
		e.vgpud = built
		if variant && name != "" {
			os.Unsetenv(name)
		}
		e.waitLeaderIdle(t, 60*time.Second, "before an A/B round")
		ms := e.extenderRound(t, c, fill, false)
		if k < 8 {
			sums[k%2] += ms
		}
		t.Logf("A/B round %d, %s: leader CPU per scheduled pod %.2f ms", k, map[bool]string{false: "as built", true: "variant (" + variantEnv + " " + variantBin + ")"}[variant], ms)
	}
	t.Logf("A/B at %d placed: as built %.2f ms, variant %.2f ms per pod (mean of four rounds each)", fill, sums[0]/4, sums[1]/4)
	return leader
}
