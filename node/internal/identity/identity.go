// Package identity is how this node tells which pod a container is: by
// the container runtime's word through vgpud's NRI hook, or, where the
// runtime has no NRI socket, by the device plugin's guess, said loudly.
// It builds the hook, watches for NRI where the node guesses, and
// announces the mode to the leader.
package identity

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// HookOptions are the node's settings the hook decides by.
type HookOptions struct {
	Node      string
	Resources wellknown.ResourceNames
	Slice     grant.Shape
	// Agent says whether a pod is a GPU agent, AgentsSynced whether it
	// can tell (nrihook.Ruleset).
	Agent        func(namespace, serviceAccount string) (bool, error)
	AgentsSynced func() bool
	// Self is the hook's own pod, namespace/name (nrihook.Ruleset).
	Self string
	// Early are namespaces (nrihook.Ruleset).
	Early []string
	// MIGParent is the GPU of a MIG device the node lists; "" for none.
	MIGParent func(uuid string) string
	// CDI names GPUs as the node's CDI devices, CDIKnown says whether it
	// can tell (nrihook.Ruleset).
	CDI      func(gpus []string) (names, nodes []string, err error)
	CDIKnown func() bool
	// Claims resolves a DRA claim's CDI device (nrihook.Ruleset).
	Claims func(ctx context.Context, cdiName, podUID, container string) (nrihook.ClaimGrant, bool, error)
}

// NewHook is the NRI hook for this node's containers; what it grants is
// told to granted.
func NewHook(o HookOptions, pods *nodepods.Index, granted nrihook.Granted, metrics nrihook.HookObserver, clk clock.WithTicker, log *slog.Logger) *nrihook.Hook {
	h := nrihook.New(nrihook.Ruleset{
		Node: o.Node, Resources: o.Resources,
		Slice:        o.Slice,
		Agent:        o.Agent,
		AgentsSynced: o.AgentsSynced,
		Self:         o.Self,
		Early:        inList(o.Early),
		MIGParent:    o.MIGParent,
		CDI:          o.CDI,
		CDIKnown:     o.CDIKnown,
		Claims:       o.Claims,
	}, pods, hookWait, metrics, clk, log.With("component", "nri"))
	h.Tell(granted)
	// The kill checks the PID's cgroup names the container first.
	h.EvictWith(func(id string, pid int) error {
		if pid <= 0 {
			return fmt.Errorf("the runtime gave no PID for container %s", id)
		}
		return usage.Procfs{Root: "/proc"}.Kill(pid, id, 0)
	})
	return h
}

// inList says whether a namespace is one of names.
func inList(names []string) func(string) bool {
	set := make(map[string]bool, len(names))
	for _, ns := range names {
		set[ns] = true
	}
	return func(ns string) bool { return set[ns] }
}

// WatchForNRI ends the role, so that the process restarts and the
// runtime names pods from then on, once the NRI socket answers: a node
// guesses only while its runtime cannot say.
func WatchForNRI(ctx context.Context, socket string, clk clock.WithTicker) error {
	if socket == "" {
		return nil
	}
	t := clk.NewTicker(nriProbePeriod)
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

// Mode is how this node will tell which pod a container is: by the
// runtime's word where its NRI socket is present, else by a guess, said
// loudly.
func Mode(socket string, log *slog.Logger) string {
	if socket != "" && nriAnswers(socket) {
		return wellknown.IdentityRuntime
	}
	log.Warn("IDENTITY IS GUESSED: no NRI socket, so Allocate guesses which pod kubelet admits, the leader binds one pod at a time here, and a pod vgpud did not schedule can be handed another's GPUs; run containerd 2.2+ or CRI-O 1.34+ with NRI enabled and its validator requiring vgpud",
		"nri-socket", socket)
	return wellknown.IdentityGuessed
}

// Announce writes node's identity annotation before the plugin serves:
// the leader reads it to decide whether binds there wait for the
// previous pod.
func Announce(ctx context.Context, nodes typedcorev1.NodesGetter, node, mode string, clk clock.Clock, log *slog.Logger) error {
	pub := inventory.NewPublisher(nodes, node)
	for {
		err := pub.SetIdentity(ctx, mode)
		if err == nil {
			return nil
		}
		log.Error("announce the node's identity mode; retrying in 2s", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(2 * time.Second):
		}
	}
}

// hookWait bounds how long the NRI hook waits for the informer to show a
// pod the runtime names: the runtime answers one call at a time, so the
// wait holds every container start and stop on the node.
const hookWait = 300 * time.Millisecond

// RuntimePhase is where a container's share stands by what the NRI hook
// did: created with its slice, refused (and why), or waiting for the
// runtime to create it.
func RuntimePhase(seen map[types.UID]nrihook.Record) func(*corev1.Pod, string) string {
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
