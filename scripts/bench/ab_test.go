//go:build bench

package bench

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/scripts/harness"
)

// abRounds compares the leader as built with a variant, in 1000-pod rounds
// that alternate between them (four each), when VGPUD_BENCH_AB_ENV (one
// NAME=value for the variant's process only: GOMAXPROCS=2 is the default
// before one P) or VGPUD_BENCH_AB_BIN (another vgpud) is set; otherwise
// it does nothing. The CPU a pod costs on this machine moved by a third
// from one run to the next, less within minutes: one run of each side
// says little, alternating rounds do. It logs each round's CPU per pod and
// records no row; it returns the leader left running, the build's own, in
// the environment it had.
func (e *env) abRounds(t *testing.T, c *http.Client, leader *harness.Process, fill int) *harness.Process {
	variantEnv, variantBin := os.Getenv("VGPUD_BENCH_AB_ENV"), os.Getenv("VGPUD_BENCH_AB_BIN")
	if variantEnv == "" && variantBin == "" {
		return leader
	}
	name, value, ok := strings.Cut(variantEnv, "=")
	if variantEnv != "" && (!ok || name == "") {
		t.Fatalf("VGPUD_BENCH_AB_ENV=%q: want NAME=value", variantEnv)
	}
	label := strings.TrimSpace(variantEnv + " " + variantBin)
	var sums [2]float64
	for k := range 9 { // the ninth round is the build's, left running
		variant := k%2 == 1
		if variant {
			leader = e.restartVariant(t, c, leader, name, value, variantBin)
		} else {
			leader, _ = e.restartLeader(t, c, leader)
		}
		e.waitLeaderIdle(t, 60*time.Second, "before an A/B round")
		ms := e.extenderRound(t, c, fill, 1000, false)
		side := "as built"
		if variant {
			side = "variant (" + label + ")"
		}
		if k < 8 {
			sums[k%2] += ms
		}
		t.Logf("A/B round %d at %d placed, %s: leader CPU per scheduled pod %.2f ms", k, fill, side, ms)
	}
	t.Logf("A/B at %d placed: as built %.2f ms, variant (%s) %.2f ms per pod, mean of four rounds each", fill, sums[0]/4, label, sums[1]/4)
	return leader
}

// restartVariant is restartLeader with bin for vgpud (if not empty) and
// name=value in the new process's environment (if name is not empty),
// both put back as they were for the processes after it.
func (e *env) restartVariant(t *testing.T, c *http.Client, old *harness.Process, name, value, bin string) *harness.Process {
	built := e.vgpud
	defer func() { e.vgpud = built }()
	if bin != "" {
		e.vgpud = bin
	}
	if name != "" {
		was, set := os.LookupEnv(name)
		if err := os.Setenv(name, value); err != nil {
			t.Fatal(fmt.Errorf("VGPUD_BENCH_AB_ENV: %w", err))
		}
		defer func() {
			if set {
				os.Setenv(name, was)
			} else {
				os.Unsetenv(name)
			}
		}()
	}
	leader, _ := e.restartLeader(t, c, old)
	return leader
}
