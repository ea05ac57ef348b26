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
// (scripts/bench/leaderfloor: the same watches, objects kept but for
// their managedFields, read after a full collection), whichever is
// higher. Without VGPUD_LEADER_FLOOR the target is 100 MiB alone.
func (e env) leaderMemory(t *testing.T) {
	rss, anon := harness.Memory(e.leaderPID)
	heap := e.heapInUse(t)
	target, limit := "<= 100 MiB", 100.0
	if bin := os.Getenv("VGPUD_LEADER_FLOOR"); bin != "" {
		floor := harness.Spawn(t, "leaderfloor", bin, "--kubeconfig="+e.kubeconfig)
		var said string
		harness.Eventually(t, 2*time.Minute, "the leader floor's watches synced", func() error {
			b, err := os.ReadFile(floor.Log)
			if err != nil || !strings.Contains(string(b), "synced") {
				return fmt.Errorf("not synced yet: %v %s", err, b)
			}
			said = strings.TrimSpace(string(b))
			return nil
		})
		var pods, nodeCount, heap int
		if _, err := fmt.Sscanf(said, "synced %d pods %d nodes, heap in use %d MiB", &pods, &nodeCount, &heap); err != nil || pods < 20000 || nodeCount < nodes {
			t.Fatalf("the leader floor says %q (%v); want at least 20000 pods and %d nodes", said, err, nodes)
		}
		// Its garbage collected and returned before it says so.
		time.Sleep(time.Second)
		frss, fanon := harness.Memory(floor.Cmd.Process.Pid)
		floor.Stop(t)
		e.record(t, "extender vs apiserver", fmt.Sprintf("floor: a program that only watches what the leader watches (every pod, node and ResourceQuota; client-go informers, protobuf, managedFields dropped), %d nodes, %d pods, after a full collection (Go heap in use %d MiB)", nodeCount, pods, heap),
			fmt.Sprintf("%.0f MiB (anon %.0f)", frss, fanon), "-", "-")
		if frss+30 > limit {
			limit = frss + 30
			target = fmt.Sprintf("<= %.0f MiB (the floor + 30)", limit)
		}
	}
	e.record(t, "extender vs apiserver", "leader RSS at 1000 nodes, 20000 pods (anon = heap, stacks and runtime; Go heap in use)", fmt.Sprintf("%.0f MiB (anon %.0f, heap %.0f)", rss, anon, heap), target, metIf(rss <= limit))
}
