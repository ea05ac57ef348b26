//go:build bench

package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/scripts/harness"
)

// leaderMemory records the leader's RSS at 1000 nodes and 20000 placed
// pods against its target: 100 MiB, or 30 MiB over the floor program
// (scripts/bench/leaderfloor: the same watches, objects kept whole),
// whichever is higher. Without VGPUD_LEADER_FLOOR (bench-compare at a
// commit from before the floor) the target is 100 MiB alone.
func (e env) leaderMemory(t *testing.T) {
	rss, anon := harness.Memory(e.leaderPID)
	heap := e.heapInUse(t)
	target, limit := "<= 100 MiB", 100.0
	if bin := os.Getenv("VGPUD_LEADER_FLOOR"); bin != "" {
		floor := harness.Spawn(t, "leaderfloor", bin, "--kubeconfig="+e.kubeconfig)
		harness.Eventually(t, 2*time.Minute, "the leader floor's watches synced", func() error {
			b, err := os.ReadFile(floor.Log)
			if err != nil || !strings.Contains(string(b), "synced") {
				return fmt.Errorf("not synced yet: %v %s", err, b)
			}
			return nil
		})
		// As long after its first list as the leader's reading comes after
		// its own.
		time.Sleep(5 * time.Second)
		frss, fanon := harness.Memory(floor.Cmd.Process.Pid)
		floor.Stop(t)
		e.record(t, "extender vs apiserver", "floor: a program that only watches what the leader watches (every pod, node and ResourceQuota; client-go informers, protobuf, objects kept whole), 1000 nodes, 20000 pods",
			fmt.Sprintf("%.0f MiB (anon %.0f)", frss, fanon), "-", "-")
		if frss+30 > limit {
			limit = frss + 30
			target = fmt.Sprintf("<= %.0f MiB (the floor + 30)", limit)
		}
	}
	e.record(t, "extender vs apiserver", "leader RSS at 1000 nodes, 20000 pods (anon = heap, stacks and runtime; Go heap in use)", fmt.Sprintf("%.0f MiB (anon %.0f, heap %.0f)", rss, anon, heap), target, metIf(rss <= limit))
}
