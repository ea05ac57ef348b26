package node

// How this node tells which pod a container is: by the container
// runtime's word through vgpud's NRI hook, or, where the runtime has no
// NRI socket, by the device plugin's guess, said loudly.

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// newHook is the NRI hook for this node's containers.
func (a *Role) newHook(pods *nodepods.Index) *nrihook.Hook {
	h := nrihook.New(nrihook.Rules{
		Node: a.node, Resources: a.resources,
		Slice:     a.sliceOptions(),
		Exempt:    inList(a.cfg.NRIExemptNamespaces),
		Early:     inList(a.cfg.NRIEarlyNamespaces),
		MIGParent: a.migParent,
	}, pods, hookWait, a.metrics, a.clock, a.log.With("component", "nri"))
	h.Tell(a.use.Granted())
	// The kill checks the PID's cgroup names the container first.
	h.EvictWith(func(id string, pid int) error {
		if pid <= 0 {
			return fmt.Errorf("the runtime gave no PID for container %s", id)
		}
		return usage.Procfs{Root: "/proc"}.Kill(pid, id, 0)
	})
	return h
}

// migParent is the GPU of the node's MIG device uuid, as the node's
// inventory lists it (made on demand too); "" for none.
func (a *Role) migParent(uuid string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.inv.MIG {
		for _, in := range g.Instances {
			if in.UUID == uuid {
				return g.UUID
			}
		}
		for _, in := range g.Possible {
			if in.Made == uuid {
				return g.UUID
			}
		}
	}
	return ""
}

// inList says whether a namespace is one of names.
func inList(names []string) func(string) bool {
	set := make(map[string]bool, len(names))
	for _, ns := range names {
		set[ns] = true
	}
	return func(ns string) bool { return set[ns] }
}

// sliceOptions are the node's settings that shape every slice it grants.
func (a *Role) sliceOptions() grant.Options {
	return grant.Options{Oversubscribe: a.cfg.MemoryScaling > 1, Interposer: a.cfg.InterposerDir}
}

// watchForNRI ends the role, so that the process restarts and the
// runtime names pods from then on, once the NRI socket answers: a node
// guesses only while its runtime cannot say.
func (a *Role) watchForNRI(ctx context.Context, socket string) error {
	if socket == "" {
		return nil
	}
	t := a.clock.NewTicker(nriProbePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if nriAnswers(socket) {
			return fmt.Errorf("the container runtime's NRI socket %s answers now; exiting so that vgpud restarts with the runtime naming each container's pod", socket)
		}
	}
}

// nriProbePeriod is how often a node that guesses looks for NRI again.
const nriProbePeriod = 30 * time.Second

// nriAnswers reports whether a runtime listens on socket: a runtime
// without NRI may leave a stale file behind, or an empty directory the
// DaemonSet's hostPath made.
func nriAnswers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// identity is how this node will tell which pod a container is: by the
// runtime's word where its NRI socket is present, else by a guess, said
// loudly.
func (a *Role) identity() string {
	if a.cfg.NRISocket != "" && nriAnswers(a.cfg.NRISocket) {
		return protocol.IdentityRuntime
	}
	a.log.Warn("IDENTITY IS GUESSED: no NRI socket, so Allocate guesses which pod kubelet admits, the leader binds one pod at a time here, and a pod vgpud did not schedule can be handed another's GPUs; run containerd 2.2+ or CRI-O 1.34+ with NRI enabled and its validator requiring vgpud",
		"nri-socket", a.cfg.NRISocket)
	return protocol.IdentityGuessed
}

// announceIdentity writes the node's identity annotation before the
// plugin serves: the leader reads it to decide whether binds there wait
// for the previous pod.
func (a *Role) announceIdentity(ctx context.Context, mode string) error {
	a.metrics.Identity(mode)
	pub := inventory.NewPublisher(a.api.Core, a.node)
	for {
		err := pub.SetIdentity(ctx, mode)
		if err == nil {
			return nil
		}
		a.log.Error("announce the node's identity mode; retrying in 2s", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-a.clock.After(2 * time.Second):
		}
	}
}

// hookWait bounds how long the NRI hook waits for the informer to show a
// pod the runtime names: the runtime answers one call at a time, so the
// wait holds every container start and stop on the node.
const hookWait = 300 * time.Millisecond

// runtimePhase is where a container's share stands by what the NRI hook
// did: created with its slice, refused (and why), or waiting for the
// runtime to create it.
func runtimePhase(seen map[types.UID]nrihook.Record) func(*corev1.Pod, string) string {
	return func(p *corev1.Pod, container string) string {
		r := seen[p.UID]
		if why, ok := r.Refused[container]; ok {
			return "refused: " + why
		}
		if _, ok := r.Granted[container]; ok {
			return "created"
		}
		return "waiting for the runtime"
	}
}
