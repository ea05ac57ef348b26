package node

import (
	"github.com/vgpud/vgpud/node/internal/cdidevices"
	"github.com/vgpud/vgpud/node/internal/identity"
	"github.com/vgpud/vgpud/node/internal/preflight"
)

// hookOptions are the settings the NRI hook decides by.
func (a *Role) hookOptions() identity.HookOptions {
	return identity.HookOptions{Node: a.node, Resources: a.resources, Slice: a.sliceOptions(),
		Agent: a.agents.Exempt, AgentsSynced: a.agents.Synced, Self: a.cfg.Pod, Early: a.cfg.Identity.NRIEarlyNamespaces, MIGParent: a.migParent,
		CDI: (&cdidevices.Resolver{Mode: a.cfg.Identity.CDI, Runtime: a.runtimeCDI, Index: a.gpuIndex}).Devices, CDIKnown: a.cdiKnown,
		Claims: a.claimGrant}
}

// runtimeCDI is whether the runtime injects CDI devices, by its latest
// reading; known and off where the node reads no runtime configuration.
func (a *Role) runtimeCDI() (preflight.CDI, bool) {
	if a.cfg.Runtime.RuntimeConfig == "" {
		return preflight.CDI{}, true
	}
	v := a.runtime.Latest()
	if v == nil {
		return preflight.CDI{}, false
	}
	return v.CDI, true
}

// cdiKnown says whether the node can tell which CDI devices a grant
// brings: the runtime's configuration read and understood, the GPUs
// discovered, and the DRA prepare record read (a claim's devices are
// the record's). Until then a running container's device nodes are no
// sign that it escaped the hook.
func (a *Role) cdiKnown() bool {
	a.mu.Lock()
	read := a.claimsRead
	a.mu.Unlock()
	if !read {
		return false
	}
	if a.cfg.Identity.CDI == cdidevices.ModeOff {
		return true
	}
	if a.cfg.Runtime.RuntimeConfig != "" {
		if v := a.runtime.Latest(); v == nil || v.Result == preflight.Unknown {
			return false
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.invReady
}

// gpuIndex is a whole GPU's NVML index by its UUID, as the inventory
// lists it.
func (a *Role) gpuIndex(uuid string) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.inv.GPUs {
		if g.UUID == uuid {
			return g.Index, true
		}
	}
	return 0, false
}

// migParent is the GPU of the node's MIG device uuid, as the node's
// inventory lists it (made on demand too); "" for none.
func (a *Role) migParent(uuid string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inv.MIGParent(uuid)
}
