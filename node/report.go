package node

import (
	"cmp"
	"fmt"

	"github.com/vgpud/vgpud/node/internal/identity"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/wellknown"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/protocol"
)

// What the node role tells others: its inventory annotation, and its
// readiness and state for inspect.

func (a *Role) setNotReady(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notReady = why
}

func (a *Role) snapshot() inspectv1.NodeSnapshot {
	ready, why := a.Ready()
	a.mu.Lock()
	inv, server, cache, hook := a.inv, a.server, a.podCache, a.hook
	a.mu.Unlock()
	s := inspectv1.NodeSnapshot{APIVersion: inspectv1.NodeVersion, Node: a.node, Backend: a.cfg.GPUs.GPUBackend, Ready: ready, NotReady: why, Role: a.role, Taken: a.clock.Now(), GPUs: []inspectv1.GPUState{}, Allocations: []inspectv1.Allocation{}}
	if a.leader != nil {
		s.Leader, s.IsLeader = a.leader.Leader(), a.leader.IsLeader()
	}
	var phase func(*corev1.Pod, string) string
	if hook != nil {
		s.Identity = wellknown.IdentityRuntime
		up, conns := hook.Connected()
		s.Runtime = fmt.Sprintf("connected %d time(s), now %s", conns, map[bool]string{true: "connected", false: "DISCONNECTED"}[up])
		phase = identity.RuntimePhase(hook.Records())
	} else if server != nil {
		s.Identity = wellknown.IdentityGuessed
	}
	if cache != nil {
		s.GPUs, s.Allocations, s.CordonProblem = inspect.Rows(a.node, inv, cache.List(), phase, a.cordon.Mark)
	}
	a.mu.Lock()
	claims := cmp.Or(a.claims, a.kept)
	s.DRA = a.claims != nil
	a.mu.Unlock()
	if claims != nil {
		var pods []*corev1.Pod
		if cache != nil {
			pods = cache.List()
		}
		s.Claims = claimRows(claims.Claims(), pods, s.GPUs)
	}
	s.Use = a.use.Snapshot()
	s.RuntimeCheck = inspect.RuntimeVerdict(a.runtime.Latest())
	if server != nil {
		r := server.Registration()
		s.Registration = inspectv1.KubeletRegistration{Count: r.Count, Last: r.Last, LatencyMs: float64(r.Latency.Microseconds()) / 1000, Trigger: r.Trigger, Error: r.Error}
	}
	return s
}

// inventory is the node's inventory as last built.
func (a *Role) inventory() protocol.Inventory {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inv
}
