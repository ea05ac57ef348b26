package node

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/node/internal/cdidevices"
	"github.com/vgpud/vgpud/node/internal/dra"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/nrihook"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
	"github.com/vgpud/vgpud/protocol/hamirecord"
	"github.com/vgpud/vgpud/protocol/inspectv1"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// startClaims starts the node's DRA driver, where the node serves
// claims (--dra): it registers with kubelet and answers its prepare
// calls from the role's start, and offers the GPUs once a generation
// publishes them (serveClaims). The prepare record outlives the
// generations and the role's restarts.
func (a *Role) startClaims(ctx context.Context) error {
	prep, record, closeCDI, err := a.openRecord()
	if err != nil {
		return err
	}
	driver, err := a.startDriver(ctx, prep, closeCDI)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.claims = driver
	a.mu.Unlock()
	a.log.Info("serving DRA claims", "driver", wellknown.DRADriver, "plugin", a.cfg.DRA.Dirs().Plugin, "record", record)
	return nil
}

// keepClaims answers, on a node moved back to the device plugin, for the
// claims it prepared while it served claims: kubelet unprepares them as
// their pods end, and the runtime hook grants their containers as
// before. It prepares none anew and publishes nothing; the leader's
// books keep the extender off what the claims hold. Where the record
// holds none, it does nothing.
func (a *Role) keepClaims(ctx context.Context) error {
	prep, record, closeCDI, err := a.openRecord()
	if err != nil {
		return err
	}
	n := len(prep.Claims())
	if n == 0 {
		closeCDI()
		return nil
	}
	prep.KeepOnly()
	driver, err := a.startDriver(ctx, prep, closeCDI)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.kept = driver
	a.mu.Unlock()
	a.log.Warn("this node serves the device plugin now, and keeps the DRA claims it prepared before until their pods end", "claims", n, "record", record)
	return nil
}

// openRecord reads the node's prepare record (--dra-record), at the
// path it returns; closeCDI ends what reads the node's NVIDIA CDI spec
// for it.
func (a *Role) openRecord() (prep *dra.Preparer, record string, closeCDI func(), err error) {
	o := a.cfg.DRA
	cdi := &cdidevices.Resolver{Mode: cdidevices.ModeOn, Runtime: a.runtimeCDI, Index: a.gpuIndex}
	record = strings.ReplaceAll(o.DRARecord, "{node}", a.node)
	if prep, err = dra.NewPreparer(a.node, record, o.CDIDir, cdi.Edits, a.log.With("component", "dra")); err != nil {
		cdi.Close()
		return nil, "", nil, err
	}
	return prep, record, cdi.Close, nil
}

// startDriver registers prep's driver with kubelet until ctx ends, then
// calls closeCDI.
func (a *Role) startDriver(ctx context.Context, prep *dra.Preparer, closeCDI func()) (*dra.ClaimDriver, error) {
	o := a.cfg.DRA
	// The driver's own directory under kubelet's plugins, which
	// kubelet does not make.
	if err := os.MkdirAll(o.Dirs().Plugin, 0o750); err != nil {
		closeCDI()
		return nil, fmt.Errorf("the DRA driver's directory: %w", err)
	}
	driver, err := dra.StartClaimDriver(ctx, a.api.Kube, a.node, o.Dirs(), a.cfg.ClaimDefaults, prep)
	if err != nil {
		closeCDI()
		return nil, err
	}
	go func() {
		<-ctx.Done()
		driver.Stop()
		closeCDI()
	}()
	return driver, nil
}

// serveClaims offers each inventory the generation builds as the node's
// devices (the first at once), then passes it on to out, the inventory
// annotation's publisher, keeping only the newest; a change of the
// node's cordon, or of the GPUs the extender's pods hold, publishes the
// same devices with their taints anew.
func (a *Role) serveClaims(ctx context.Context, first protocol.Inventory, in <-chan protocol.Inventory, out chan protocol.Inventory, pods *nodepods.Index) error {
	// Not before the cordon is read: a restart would otherwise publish
	// a cordoned GPU untainted for a moment.
	select {
	case <-ctx.Done():
		return nil
	case <-a.cordon.Synced():
	}
	inv := first
	for {
		podsChanged := pods.Changed()
		booked := extenderBooked(pods.List(), a.node, inv)
		if err := a.claims.Publish(ctx, inv, dradevices.Marks{Cordoned: a.cordon.Cordoned(inv), Booked: booked}); err != nil {
			return err
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-a.cordon.Changes():
				break wait
			case <-podsChanged:
				podsChanged = pods.Changed()
				if !maps.Equal(extenderBooked(pods.List(), a.node, inv), booked) {
					break wait
				}
			case inv = <-in:
				select {
				case <-out:
				default:
				}
				out <- inv
				break wait
			}
		}
	}
}

// extenderBooked are the GPUs, by UUID, that pods placed on node
// without a claim still hold: the extender's, by their
// vgpud.io/assignment (which only vgpud writes), and HAMi's, by HAMi's
// record (which only HAMi's scheduler writes). A node moved to DRA with
// them running taints these, since kube-scheduler's books do not hold
// them. A record that does not read holds every GPU of inv: which it
// names is unknown.
func extenderBooked(pods []*corev1.Pod, node string, inv protocol.Inventory) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != node || podmodel.Terminated(p) {
			continue
		}
		var a protocol.Assignment
		var err error
		if raw, ok := p.Annotations[wellknown.AnnotationAssignment]; ok {
			if a, err = protocol.DecodeAssignment(raw); err == nil && a.Node != node {
				continue
			}
		} else if nrihook.PlacedByHAMi(p, node) {
			a, err = hamirecord.DecodeHAMiAllocation(p.Annotations[hamirecord.AnnotationHAMiAllocated], node)
		} else {
			continue
		}
		if err != nil {
			for _, g := range inv.GPUs {
				out[g.UUID] = true
			}
			for _, g := range inv.MIG {
				inGPU(out, g)
			}
			continue
		}
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				out[g.UUID] = true // a GPU's, or a MIG instance's
				// HAMi's record names an instance by its GPU.
				if i := slices.IndexFunc(inv.MIG, func(m protocol.MIGGPU) bool { return m.UUID == g.UUID }); i >= 0 {
					inGPU(out, inv.MIG[i])
				}
			}
		}
	}
	return out
}

// inGPU adds g's MIG instances to out.
func inGPU(out map[string]bool, g protocol.MIGGPU) {
	for _, in := range g.Instances {
		out[in.UUID] = true
	}
}

// claimGrant is the grant behind a DRA claim's CDI device kubelet gave
// container of pod podUID, from the prepare record, for the runtime
// hook. A node that serves no claims refuses every claim's device.
func (a *Role) claimGrant(ctx context.Context, cdiName, podUID, container string) (nrihook.ClaimGrant, bool, error) {
	a.mu.Lock()
	claims := cmp.Or(a.claims, a.kept)
	a.mu.Unlock()
	if claims == nil {
		if !strings.HasPrefix(cdiName, wellknown.DRAClaimCDIKind+"=") {
			return nrihook.ClaimGrant{}, false, nil
		}
		return nrihook.ClaimGrant{}, true, fmt.Errorf("CDI device %s is a DRA claim's, and node %s serves no claims (--dra)", cdiName, a.node)
	}
	g, ours, err := claims.Resolve(ctx, cdiName, podUID, container)
	if err != nil || !ours {
		return nrihook.ClaimGrant{}, ours, err
	}
	return nrihook.ClaimGrant{CDI: cdiName, Nodes: g.Nodes, Share: g.Share, Claim: g.Claim,
		Slice: protocol.GPUSlice{UUID: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores, MIG: g.MIG}}, true, nil
}

// withdrawClaims deletes the ResourceSlices an earlier run of this node
// role published while it served claims: a node that no longer does
// must offer the scheduler nothing kubelet could not prepare. A cluster
// without the resource API has none.
func (a *Role) withdrawClaims(ctx context.Context) {
	slices := a.api.Kube.ResourceV1().ResourceSlices()
	list, err := slices.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a.node + ",spec.driver=" + wellknown.DRADriver})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		a.log.Warn("could not list this node's DRA ResourceSlices, which it no longer serves", "err", err)
		return
	}
	for _, s := range list.Items {
		if err := slices.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}}); err != nil && !apierrors.IsNotFound(err) {
			a.log.Warn("could not delete a DRA ResourceSlice of this node, which it no longer serves", "slice", s.Name, "err", err)
			continue
		}
		a.log.Info("DRA ResourceSlice withdrawn: this node serves the device plugin now", "slice", s.Name)
	}
}

// claimRows are the node's prepared claims as inspect shows them, each
// pod by name where the node's informer has it, in claim order; what
// they hold is added to gpus' use.
func claimRows(claims map[string]dra.Prepared, pods []*corev1.Pod, gpus []inspectv1.GPUState) []inspectv1.ClaimAllocation {
	names := make(map[string]string, len(pods))
	for _, p := range pods {
		names[string(p.UID)] = p.Name
	}
	at := make(map[string]int, len(gpus))
	for i, g := range gpus {
		at[g.UUID] = i
	}
	out := []inspectv1.ClaimAllocation{}
	for _, c := range claims {
		var who []string
		for _, uid := range c.Pods {
			if n, ok := names[uid]; ok {
				uid = n
			}
			who = append(who, uid)
		}
		slices.Sort(who)
		for _, g := range c.Grants {
			out = append(out, inspectv1.ClaimAllocation{Namespace: c.Namespace, Claim: c.Name, Pods: who, Device: g.Device, GPU: g.UUID, MemoryMiB: g.MemoryMiB, Cores: g.Cores})
			if i, ok := at[g.UUID]; ok {
				gpus[i].MemoryUsedMiB += g.MemoryMiB
				gpus[i].CoresUsed += g.Cores
				gpus[i].SlicesUsed += g.Slots
			}
		}
	}
	slices.SortFunc(out, func(a, b inspectv1.ClaimAllocation) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Device, b.Device))
	})
	return out
}
