package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vgpud/vgpud/node/internal/identity"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/protocol"
)

// What the node role tells others: its inventory annotation, and its
// readiness and state for inspect.

// publish writes the inventory annotation at start and whenever health
// changes it, retrying failed writes.
func (a *Role) publish(ctx context.Context, pub *inventory.Publisher, changed <-chan protocol.Inventory) error {
	a.mu.Lock()
	inv := a.inv
	a.mu.Unlock()
	retry := a.clock.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case inv = <-changed:
		case <-retry.C():
		}
		wrote, err := pub.Publish(ctx, inv)
		if err != nil {
			a.log.Error("publish GPU inventory; retrying in 5s", "err", err)
			retry.Reset(5 * time.Second)
			continue
		}
		if wrote {
			unhealthy := 0
			for _, g := range inv.GPUs {
				if !g.Healthy {
					unhealthy++
				}
			}
			a.log.Info("GPU inventory published", "node", a.node, "gpus", len(inv.GPUs), "unhealthy", unhealthy)
		}
	}
}

func (a *Role) setNotReady(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notReady = why
}

func (a *Role) snapshot() inspect.NodeSnapshot {
	ready, why := a.Ready()
	a.mu.Lock()
	inv, server, cache, hook := a.inv, a.server, a.podCache, a.hook
	a.mu.Unlock()
	s := inspect.NodeSnapshot{Node: a.node, Backend: a.cfg.GPUs.GPUBackend, Ready: ready, NotReady: why, Role: a.role, Taken: a.clock.Now(), GPUs: []inspect.GPUState{}, Allocations: []inspect.Allocation{}}
	if a.leader != nil {
		s.Leader, s.IsLeader = a.leader.Leader(), a.leader.IsLeader()
	}
	var phase func(*corev1.Pod, string) string
	if hook != nil {
		s.Identity = protocol.IdentityRuntime
		up, conns := hook.Connected()
		s.Runtime = fmt.Sprintf("connected %d time(s), now %s", conns, map[bool]string{true: "connected", false: "DISCONNECTED"}[up])
		phase = identity.RuntimePhase(hook.Records())
	} else if server != nil {
		s.Identity = protocol.IdentityGuessed
	}
	if cache != nil {
		s.GPUs, s.Allocations = inspect.Usage(a.node, inv, cache.List(), phase)
		// Over the GPUs as the leader books them, the rows' order: a MIG
		// GPU's index or UUID cordons its instances.
		gpus, mig := inv.Bookable()
		cordoned, problem := a.cordon.Mark(gpus, mig)
		for i := range s.GPUs {
			s.GPUs[i].Cordoned = cordoned[i]
		}
		s.CordonProblem = problem
		s.GPUs = slices.DeleteFunc(s.GPUs, unmade(inv))
	}
	s.Use = a.use.Snapshot()
	s.RuntimeCheck = a.runtime.Latest()
	if server != nil {
		r := server.Registration()
		s.Registration = inspect.KubeletRegistration{Count: r.Count, Last: r.Last, LatencyMs: float64(r.Latency.Microseconds()) / 1000, Trigger: r.Trigger, Error: r.Error}
	}
	return s
}

// unmade says whether a row is an instance the node may make on demand
// and has not made, nor is it booked: one of many alternatives, which
// would drown the rows that hold something.
func unmade(inv protocol.Inventory) func(inspect.GPUState) bool {
	made := map[string]bool{}
	for _, g := range inv.MIG {
		for _, p := range g.Possible {
			made[p.UUID] = p.Made != ""
		}
	}
	return func(r inspect.GPUState) bool {
		isMade, possible := made[r.UUID]
		return possible && !isMade && r.SlicesUsed == 0
	}
}
