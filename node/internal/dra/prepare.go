package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/google/renameio/v2"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// ClaimKind is the CDI kind of the devices vgpud prepares for claims:
// one per allocated device, named by the claim's UID, so that no name
// is used twice and the runtime hook knows the claim by it.
const ClaimKind = wellknown.DRAClaimCDIKind

// recordVersion is the prepare record's format.
const recordVersion = 1

// Prepared is a claim as the node prepared it.
type Prepared struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the UIDs of the pods the claim was reserved for when it
	// was prepared: only their containers get its grants.
	Pods   []string `json:"pods"`
	Grants []Grant  `json:"grants"`
}

// record is the prepare record's file.
type record struct {
	Version int                  `json:"version"`
	Claims  map[string]*Prepared `json:"claims"` // by claim UID
}

// Preparer is the node's DRA driver towards kubelet: it turns a claim's
// allocation on this node into CDI devices that bring the GPU's device
// nodes and mounts, and remembers, in a file on the node, what it
// prepared for which pods; the runtime hook reads that, not the claim's
// allocation (a pod that joins a claim is checked against the claim
// read again: Resolve). It survives a restart of the node role from the
// file.
type Preparer struct {
	node   string
	path   string // the record; "" keeps it in memory only
	cdiDir string // where the claims' CDI specs go
	// edits are what the node's NVIDIA CDI spec does for a GPU, less
	// env (cdidevices.Resolver.Edits).
	edits func(uuid string) (cdispecs.ContainerEdits, error)
	log   *slog.Logger
	// getClaim reads a claim again, for a pod that joined one prepared
	// earlier; nil refuses such a pod.
	getClaim ClaimGetter

	mu sync.Mutex
	// keepOnly: the node no longer serves claims; it answers for those
	// it prepared until kubelet unprepares them (KeepOnly).
	keepOnly bool
	offered  map[string]offer // what the node publishes
	// fenced are the devices, by UUID, published tainted: why no new
	// claim is prepared there, though a claim may tolerate the taint.
	fenced map[string]string
	claims map[string]*Prepared
}

// NewPreparer reads what an earlier run prepared from the record at
// path. A record that does not read is an error: forgetting a prepared
// claim would let its devices be handed out twice.
func NewPreparer(node, path, cdiDir string, edits func(uuid string) (cdispecs.ContainerEdits, error), log *slog.Logger) (*Preparer, error) {
	p := &Preparer{node: node, path: path, cdiDir: cdiDir, edits: edits, log: log, offered: map[string]offer{}, claims: map[string]*Prepared{}}
	if path == "" {
		return p, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the DRA prepare record: %w", err)
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil || rec.Version != recordVersion {
		return nil, fmt.Errorf("the DRA prepare record %s is not version %d (%v): move it aside only once no pod on this node uses a claim", path, recordVersion, err)
	}
	if rec.Claims != nil {
		p.claims = rec.Claims
	}
	return p, nil
}

// Offer sets what the node publishes, which claims are prepared against,
// and the GPUs m marks and the unhealthy ones, on which no new claim is
// prepared.
func (p *Preparer) Offer(inv protocol.Inventory, m dradevices.Marks) {
	o, f := offers(inv), fenced(inv, m)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.offered, p.fenced = o, f
}

// KeepOnly makes p prepare no new claim: the node serves the device
// plugin now, and keeps the claims it prepared while it served claims,
// as recorded, until kubelet unprepares them as their pods end.
func (p *Preparer) KeepOnly() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keepOnly = true
}

// Claim is what the node prepared for the claim with that UID.
func (p *Preparer) Claim(uid string) (Prepared, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.claims[uid]
	if !ok {
		return Prepared{}, false
	}
	return *c, true
}

// Claims are what the node prepared, by claim UID.
func (p *Preparer) Claims() map[string]Prepared {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Prepared, len(p.claims))
	for uid, c := range p.claims {
		out[uid] = *c
	}
	return out
}

// PrepareResourceClaims prepares each claim (kubeletplugin.DRAPlugin).
// kubelet may ask again for a claim prepared before (after it restarts):
// it is prepared anew from the claim as it reads now, against the
// node's other claims, under the same CDI device names.
func (p *Preparer) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		prep, err := p.prepare(c)
		if err != nil {
			p.log.Warn("DRA claim not prepared", "claim", c.Namespace+"/"+c.Name, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		res := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
		for _, g := range prep.Grants {
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{g.Request}, PoolName: p.node, DeviceName: g.Device, CDIDeviceIDs: []string{ClaimKind + "=" + g.CDI}})
		}
		out[c.UID] = res
	}
	return out, nil
}

// prepare writes c's CDI spec, then the record: a claim is in the
// record only once its devices exist.
func (p *Preparer) prepare(c *resourceapi.ResourceClaim) (*Prepared, error) {
	uid := string(c.UID)
	if p.keepOnly {
		// kubelet asks again for a claim it prepared before (it
		// restarted): the record and the CDI spec are as they were.
		if prev, had := p.claims[uid]; had {
			return prev, nil
		}
		return nil, fmt.Errorf("claim %s/%s: node %s no longer serves DRA claims (dra is off there); it keeps only the claims it prepared before until their pods end", c.Namespace, c.Name, p.node)
	}
	gs, err := grants(c, p.node, p.offered, func(i int) string { return cdiDevice(uid, i) })
	if err != nil {
		return nil, err
	}
	// A claim may tolerate vgpud's taints; the node does not. One it
	// prepared before keeps its devices.
	if _, had := p.claims[uid]; !had {
		for _, g := range gs {
			if why := p.fenced[g.UUID]; why != "" {
				return nil, fmt.Errorf("claim %s/%s, device %s: GPU %s is %s; vgpud prepares no new claim there, whatever it tolerates", c.Namespace, c.Name, g.Device, g.UUID, why)
			}
		}
	}
	var held []Grant
	for other, prep := range p.claims {
		if other != uid {
			held = append(held, prep.Grants...)
		}
	}
	if err := overbooked(held, gs, p.offered); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	prep := &Prepared{Namespace: c.Namespace, Name: c.Name, Grants: gs, Pods: []string{}}
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			prep.Pods = append(prep.Pods, string(r.UID))
		}
	}
	slices.Sort(prep.Pods)
	edits := make([]cdispecs.ContainerEdits, len(gs))
	for i := range gs {
		if edits[i], err = p.edits(gs[i].UUID); err != nil {
			return nil, fmt.Errorf("device %s (%s): %w", gs[i].Device, gs[i].UUID, err)
		}
		gs[i].Nodes = []string{}
		for _, n := range edits[i].DeviceNodes {
			gs[i].Nodes = append(gs[i].Nodes, n.Path)
		}
	}
	if err := p.writeSpec(uid, gs, edits); err != nil {
		return nil, err
	}
	prev, had := p.claims[uid]
	p.claims[uid] = prep
	if err := p.save(); err != nil {
		// What is on disk still holds the earlier entry: so must the
		// books, or its capacity would be handed out again.
		if had {
			p.claims[uid] = prev
		} else {
			delete(p.claims, uid)
		}
		return nil, err
	}
	return prep, nil
}

// UnprepareResourceClaims forgets each claim and removes its CDI spec
// (kubeletplugin.DRAPlugin); one never prepared is no error.
func (p *Preparer) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		uid := string(c.UID)
		prev, had := p.claims[uid]
		delete(p.claims, uid)
		if err := p.save(); err != nil {
			if had {
				p.claims[uid] = prev
			}
			out[c.UID] = err
			continue
		}
		if err := os.Remove(p.specPath(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
			out[c.UID] = fmt.Errorf("remove claim %s's CDI spec: %w", c.String(), err)
			continue
		}
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs what the helper met in the background
// (kubeletplugin.DRAPlugin): publishing retries on its own.
func (p *Preparer) HandleError(_ context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		p.log.Error("the apiserver dropped fields of vgpud's ResourceSlices: turn these feature gates on, or GPUs are offered without what they need", "features", dropped.DisabledFeatures(), "err", err)
		return
	}
	p.log.Error("DRA driver", "step", msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// writeSpec writes the claim's CDI spec: a device per grant, with what
// the node's NVIDIA spec does for its GPU, less env.
func (p *Preparer) writeSpec(uid string, gs []Grant, edits []cdispecs.ContainerEdits) error {
	spec := cdispecs.Spec{Kind: ClaimKind, Devices: make([]cdispecs.Device, 0, len(gs))}
	for i, g := range gs {
		spec.Devices = append(spec.Devices, cdispecs.Device{Name: g.CDI, ContainerEdits: edits[i]})
	}
	v, err := cdispecs.MinimumRequiredVersion(&spec)
	if err != nil {
		return fmt.Errorf("claim %s's CDI spec: %w", uid, err)
	}
	spec.Version = v
	raw, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("claim %s's CDI spec: %w", uid, err)
	}
	if err := renameio.WriteFile(p.specPath(uid), raw, 0o644); err != nil {
		return fmt.Errorf("write claim %s's CDI spec: %w", uid, err)
	}
	return nil
}

func (p *Preparer) specPath(uid string) string {
	return filepath.Join(p.cdiDir, "vgpud-claim-"+uid+".json")
}

// save writes the record.
func (p *Preparer) save() error {
	if p.path == "" {
		return nil
	}
	raw, err := json.Marshal(record{Version: recordVersion, Claims: p.claims})
	if err != nil {
		return fmt.Errorf("the DRA prepare record: %w", err)
	}
	if err := renameio.WriteFile(p.path, raw, 0o600); err != nil {
		return fmt.Errorf("write the DRA prepare record: %w", err)
	}
	return nil
}
