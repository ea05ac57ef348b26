// Package preflight reads a node's container runtime configuration, as
// the runtime itself would merge it (imports and drop-ins included), and
// says whether the runtime fails closed without vgpud: NRI on, and its
// default validator refusing every container vgpud's hook did not see.
// A node that fails open creates GPU containers with whatever devices
// their image or pod names while vgpud is down, which is why it is
// checked, shown and alerted on rather than assumed.
package preflight

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Results of a check, as the node's annotation carries them.
const (
	FailsClosed = protocol.RuntimeFailsClosed
	FailsOpen   = protocol.RuntimeFailsOpen
	Unknown     = protocol.RuntimeUnknown

	ScopeAll     = protocol.RuntimeScopeAll
	ScopeGPUPods = protocol.RuntimeScopeGPUPods
)

// Verdict is what one node's runtime configuration says.
type Verdict struct {
	Result  string `json:"result"`  // FailsClosed, FailsOpen or Unknown
	Runtime string `json:"runtime"` // "containerd" or "cri-o"
	Config  string `json:"config"`  // the main file, as the runtime names it
	// Scope is what the runtime refuses without vgpud's hook where its
	// files fail closed: ScopeAll or ScopeGPUPods.
	Scope string `json:"scope,omitempty"`
	// Files are the files merged, in the runtime's order.
	Files []string `json:"files,omitempty"`
	// Problems say what to change, one each; a verdict that fails closed
	// may still have some (vgpud's own pods could not start, say).
	Problems []string `json:"problems,omitempty"`
	// CDI is whether the runtime injects CDI devices, and from where;
	// zero where its configuration could not be read.
	CDI CDI `json:"cdi"`

	newest time.Time // the newest file's modification time
}

// Closed says whether the runtime was seen to fail closed.
func (v Verdict) Closed() bool { return v.Result == FailsClosed }

// Want is what vgpud's node setup asks of the runtime.
type Want struct {
	Plugin   string // the name vgpud's hook registers with (nrihook.PluginName)
	Tolerate string // the annotation that lets a pod start without the hook
	Socket   string // the NRI socket vgpud connects to
}

// nri is a runtime's NRI settings after merging, in common terms.
type nri struct {
	Enabled            bool
	Socket             string // "" for the runtime's default
	DisableConnections bool   // containerd: no externally started plugin may connect
	Validator          bool   // the default validator is on
	Required           []string
	Tolerate           string
}

// defaultSocket is NRI's default socket, which both runtimes use when the
// configuration names none.
const defaultSocket = "/var/run/nri/nri.sock"

// judge turns merged settings into a verdict; setup names the drop-in
// that fixes what is wrong, for the problems' text. With the validator
// on, the runtime refuses what NRI's per-pod required-plugins annotation
// names, which admission sets on every pod that could reach a GPU
// (ScopeGPUPods); where the validator requires vgpud itself, it refuses
// every container (ScopeAll).
func judge(s nri, w Want, setup string) (result, scope string, problems []string) {
	result = FailsClosed
	open := func(format string, a ...any) {
		result = FailsOpen
		problems = append(problems, fmt.Sprintf(format, a...))
	}
	switch {
	case !s.Enabled:
		open("NRI is off, so vgpud's hook is never asked and containers get the GPUs their image or pod names: install %s", setup)
	case !s.Validator:
		open("NRI's default validator is off, so a container is created even when vgpud's hook is not connected: install %s", setup)
	case slices.Contains(s.Required, w.Plugin):
		scope = ScopeAll
	default:
		scope = ScopeGPUPods
	}
	if s.Enabled && s.DisableConnections {
		problems = append(problems, "NRI refuses plugins started outside the runtime (disable_connections), so vgpud's hook cannot connect: remove disable_connections")
	}
	socket := s.Socket
	if socket == "" {
		socket = defaultSocket
	}
	if s.Enabled && w.Socket != "" && socket != w.Socket {
		problems = append(problems, fmt.Sprintf("the runtime's NRI socket is %s but vgpud connects to %s: set vgpud's --nri-socket, or the runtime's socket, so they match", socket, w.Socket))
	}
	// Another annotation that tolerates the hook's absence is one
	// vgpud's admission does not guard: any tenant could set it.
	if result == FailsClosed && s.Tolerate != "" && s.Tolerate != w.Tolerate {
		open("NRI's validator lets pods annotated %q start without vgpud's hook, an annotation vgpud's admission does not keep tenants from setting: set tolerate_missing_plugins_annotation to %q (install %s)", s.Tolerate, w.Tolerate, setup)
	}
	if result == FailsClosed && scope == ScopeAll && s.Tolerate == "" {
		problems = append(problems, fmt.Sprintf("NRI's validator lets no pod start without vgpud's hook, vgpud's own pods and the pod network's included: set tolerate_missing_plugins_annotation to %q (install %s)", w.Tolerate, setup))
	}
	if result != FailsClosed {
		scope = ""
	}
	return result, scope, problems
}

// Summary is the verdict in one line, for inspect and preflight.
func Summary(v Verdict) string {
	var what string
	switch {
	case v.Result == FailsClosed && v.Scope == ScopeGPUPods:
		what = "FAILS CLOSED for pods that could reach a GPU: the runtime creates none of their containers without vgpud's hook (admission marks them " + wellknown.AnnotationRequiredPlugins + "); other pods start while vgpud is down"
	case v.Result == FailsClosed:
		what = "FAILS CLOSED: the runtime creates no container vgpud's hook did not see, but those of pods annotated to start without it"
	case v.Result == FailsOpen:
		what = "FAILS OPEN: containers are created while vgpud's hook is away, with the GPUs their image or pod names"
	default:
		what = "UNKNOWN: its configuration could not be read"
	}
	return fmt.Sprintf("%s (%s, %s)", what, v.Runtime, strings.Join(v.Files, ", "))
}
