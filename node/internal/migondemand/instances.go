// Package migondemand is MIG on demand as the node runs it: which GPUs
// and profiles it may make instances on (from its Options), what it made
// before, the record's lock between a node role and the one replacing
// it, and the loop that makes and destroys instances as pods come and go
// (the making itself is migmaker's).
package migondemand

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/migmaker"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/protocol/mig"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Instances are the node's MIG maker and what it may make. Its maker is
// nil where --mig-on-demand is off but the record names instances made
// before: those stay hidden from placement, and untouched. A nil
// *Instances makes nothing and hides nothing.
type Instances struct {
	opts  Options
	log   *slog.Logger
	maker *migmaker.Maker

	mu      sync.Mutex
	catalog map[string]migmaker.Slot // of the GPUs served now (a rescan renews it)
	ours    map[string]bool          // MIG devices made, now or before
	// oursAt are the placements of every instance the record named since
	// the GPUs were last discovered, by GPU: a GPU instance discovery
	// found there is the node's own, destroyed since or not.
	oursAt map[string][]mig.Span
}

func (o *Instances) slots() map[string]migmaker.Slot {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.catalog
}

// State is what the inventory lists of it; the zero value for none.
func (o *Instances) State() inventory.OnDemand { return o.view(true) }

// Advertisable is State with every instance of the catalog listed, even
// those overlapping an instance kept for processes or made under a
// profile no longer allowed: kubelet is told of each device for a whole
// generation, and what such an instance blocks is free again before the
// next. The leader's books keep the real count.
func (o *Instances) Advertisable() inventory.OnDemand { return o.view(false) }

// view is State (published) or Advertisable.
func (o *Instances) view(published bool) inventory.OnDemand {
	if o == nil {
		return inventory.OnDemand{}
	}
	if o.maker == nil {
		return inventory.OnDemand{Ours: o.IsOurs}
	}
	made := o.maker.MadeAll()
	cat := maps.Clone(o.slots())
	// A made instance the catalog no longer lists (its profile taken off
	// the allowlist) still takes its placement while its pod holds it;
	// one kept for processes of an ended pod is offered to none.
	taken := map[string][]mig.Span{}
	kept := map[string]inventory.Kept{}
	o.mu.Lock()
	for _, e := range o.maker.Entries() {
		at := mig.Span{Start: e.Start, Size: e.Size}
		if !slices.Contains(o.oursAt[e.Parent], at) {
			o.oursAt[e.Parent] = append(o.oursAt[e.Parent], at) // intended too: what a crash left is its
		}
		if !published {
			continue
		}
		if o.maker.Busy(e.ID) {
			// Its pod has ended: the leader charges it to that pod's
			// namespace while it stays. Known from the catalog only;
			// one made under a profile since taken off the allowlist is
			// hidden all the same.
			if sl, ok := cat[e.ID]; ok && e.Made != nil {
				kept[e.ID] = inventory.Kept{Slot: sl, Made: e.Made.UUID, Pod: e.Pod[strings.LastIndexByte(e.Pod, '/')+1:]}
			}
			delete(cat, e.ID)
		}
		if _, listed := cat[e.ID]; !listed && e.Made != nil {
			taken[e.Parent] = append(taken[e.Parent], at)
		}
	}
	oursAt := make(map[string][]mig.Span, len(o.oursAt))
	for k, v := range o.oursAt {
		oursAt[k] = slices.Clone(v)
	}
	for _, uuid := range made {
		o.ours[uuid] = true
	}
	o.mu.Unlock()
	return inventory.OnDemand{Catalog: cat, Made: made, Ours: o.IsOurs, Taken: taken, OursAt: oursAt, Kept: kept}
}

// MadeParents is each MIG device the node made, by UUID, with its GPU:
// the usage sampler finds an instance made after it started there.
func (o *Instances) MadeParents() map[string]string {
	if !o.Making() {
		return nil
	}
	out := map[string]string{}
	for _, e := range o.maker.Entries() {
		if e.Made != nil && e.Made.UUID != "" {
			out[e.Made.UUID] = e.Parent
		}
	}
	return out
}

// Making says whether the node makes instances (not only hides those
// it made before).
func (o *Instances) Making() bool { return o != nil && o.maker != nil }

// Quiet runs f while the maker is between passes: a read of the GPUs'
// MIG devices then never sees one made and not yet recorded.
func (o *Instances) Quiet(f func()) {
	if !o.Making() {
		f()
		return
	}
	o.maker.Quiet(f)
}

// IsOurs says whether uuid is a MIG device the node made: recorded now,
// or seen made before. (gpu.Own, for the rescan.)
func (o *Instances) IsOurs(uuid string) bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	seen := o.ours[uuid]
	o.mu.Unlock()
	return seen || o.Making() && slices.Contains(slices.Collect(maps.Values(o.maker.MadeAll())), uuid)
}

// OwnsAt says whether the record names an instance, made or about to
// be, on GPU parent at placement at. (gpu.Own: the rescan reads the
// GPUs while the maker is between passes, so its record is current.)
func (o *Instances) OwnsAt(parent string, at mig.Span) bool {
	if !o.Making() {
		return false
	}
	return slices.ContainsFunc(o.maker.Entries(), func(e migmaker.Entry) bool {
		return e.Parent == parent && e.Start == at.Start && e.Size == at.Size
	})
}

// AsDiscovered is gpu.Own for the GPUs as discovered: see asDiscovered.
func (o *Instances) AsDiscovered() gpu.Own { return asDiscovered{o} }

// Maker is the part's maker; nil where the node makes nothing.
func (o *Instances) Maker() *migmaker.Maker {
	if o == nil {
		return nil
	}
	return o.maker
}

// asDiscovered is gpu.Own for the GPUs as discovered: a GPU instance
// there is the node's own if the record named its placement at any time
// since (oursAt), destroyed since or not, so that the maker's passes
// between discovery and the rescan's first look change nothing.
type asDiscovered struct{ *Instances }

func (d asDiscovered) OwnsAt(parent string, at mig.Span) bool {
	if d.Instances == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.oursAt[parent], at)
}

// Open opens the record of what the node made and reads the profiles of
// the GPUs opts names; nil where it names none and nothing was made
// before. mode is the node's identity mode: making needs the runtime
// hook.
func Open(opts Options, lib nvml.Interface, devs []gpu.Device, mode string, log *slog.Logger) (*Instances, error) {
	if len(opts.MIGOnDemand) == 0 {
		return madeBefore(opts, log)
	}
	if mode != wellknown.IdentityRuntime {
		log.Warn("MIG instances are not made on demand: that needs the runtime hook (NRI), which hands each container the instance made for it", "flag", FlagMIGOnDemand)
		return madeBefore(opts, log)
	}
	cat, err := catalog(opts, lib, devs, true, log)
	if err != nil {
		return nil, err
	}
	m, err := migmaker.Open(opts.MIGRecord, migmaker.NVML{Lib: lib}, log.With("component", "mig"))
	if err != nil {
		return nil, err
	}
	od := &Instances{opts: opts, log: log, catalog: cat, maker: m, ours: map[string]bool{}, oursAt: map[string][]mig.Span{}}
	od.State() // what the record says is made is ours
	log.Info("making MIG instances on demand", "instances possible", len(cat), "record", opts.MIGRecord)
	return od, nil
}

// madeBefore is, where --mig-on-demand is off, the instances the record
// says the node made while it was on: still there, perhaps held by
// running pods, they are not offered as the operator's. nil for none.
func madeBefore(opts Options, log *slog.Logger) (*Instances, error) {
	if opts.MIGRecord == "" {
		return nil, nil
	}
	entries, err := migmaker.Load(opts.MIGRecord)
	if err != nil {
		// Off, the node makes nothing by it: it serves on, saying so.
		log.Warn("MIG on demand is off, and its record is unreadable: instances it names, if any, may be listed as the operator's", "err", err)
		return nil, nil
	}
	ours := map[string]bool{}
	for _, e := range entries {
		if e.Made != nil && e.Made.UUID != "" {
			ours[e.Made.UUID] = true
		}
	}
	if len(ours) == 0 {
		return nil, nil
	}
	log.Warn("MIG instances made on demand remain, and --mig-on-demand is off: they are offered to no pod, and destroyed once it is on again and no pod holds them", "instances", len(ours), "record", opts.MIGRecord)
	return &Instances{opts: opts, log: log, ours: ours}, nil
}

// KeepMock has the mock's MIG instances outlive the process where node
// makes them on demand: a driver's outlive vgpud's, and the mock's do
// beside the record, so that a restart finds them.
func KeepMock(opts Options, node string, m *gpu.Mock) error {
	if len(opts.MIGOnDemand) == 0 || opts.MIGRecord == "" {
		return nil
	}
	return m.KeepMIG(filepath.Join(filepath.Dir(opts.MIGRecord), "mock-mig-"+node+".json"))
}

// Renew reads the catalog again for the GPUs a rescan found.
func (o *Instances) Renew(lib nvml.Interface, devs []gpu.Device) {
	if !o.Making() {
		return
	}
	o.maker.Recheck() // a reset GPU may have taken what the node made
	o.mu.Lock()
	clear(o.oursAt) // the GPUs as discovered now
	o.mu.Unlock()
	cat, err := catalog(o.opts, lib, devs, false, o.log)
	if err != nil {
		o.log.Warn("MIG on demand: profiles after the rescan", "err", err)
		return
	}
	o.mu.Lock()
	o.catalog = cat
	o.mu.Unlock()
}

// catalog is every instance the node may make on the GPUs of devs that
// --mig-on-demand names and are in MIG mode, of the allowed profiles.
// strict: an entry that names no GPU is an error, not (after a rescan,
// the GPU gone) skipped.
func catalog(opts Options, lib nvml.Interface, devs []gpu.Device, strict bool, log *slog.Logger) (map[string]migmaker.Slot, error) {
	all := slices.Contains(opts.MIGOnDemand, "all")
	matched := map[string]bool{}
	profiles := map[string][]gpu.MIGProfile{}
	for _, d := range devs {
		named := all
		for _, e := range opts.MIGOnDemand {
			if e == d.UUID || e == strconv.Itoa(d.Index) {
				matched[e], named = true, true
			}
		}
		switch {
		case !named:
			continue
		case d.MIG == nil:
			// vgpud never changes a GPU's MIG mode.
			log.Warn("a GPU named for MIG on demand is not in MIG mode; it is shared as usual", "gpu", d.UUID, "index", d.Index)
			continue
		}
		ps, err := gpu.MIGProfiles(lib, d.UUID)
		if err != nil {
			return nil, fmt.Errorf("MIG on demand: %w", err)
		}
		profiles[d.UUID] = ps
	}
	for _, e := range opts.MIGOnDemand {
		if strict && e != "all" && !matched[e] {
			return nil, fmt.Errorf("%s %q matches no GPU on this node; want all, an index 0..%d or one of its UUIDs", "--"+FlagMIGOnDemand, e, len(devs)-1)
		}
	}
	allow := func(p string) bool {
		return len(opts.MIGOnDemandProfiles) == 0 || slices.Contains(opts.MIGOnDemandProfiles, p)
	}
	return migmaker.Catalog(profiles, allow), nil
}

// Make makes the instances node's pods are booked on and destroys those
// no pod that has not ended asks for, at each change to the pods and
// every migRetry (a destroy waits for the pod's processes to end),
// calling changed after what is made changed. It takes the record's
// lock first where the role's start could not (RecordLock). nvml is
// held for reading around each pass: a rescan holds it for writing
// while it shuts NVML down.
func (o *Instances) Make(ctx context.Context, lock *RecordLock, pods *nodepods.Index, node string, nvml sync.Locker, clk clock.Clock, changed func()) error {
	log := o.log
	if taken, err := lock.take(ctx, o.maker, log); err != nil || ctx.Err() != nil {
		return err
	} else if taken {
		changed() // the record as the last holder left it
	}
	var lastUnknown string
	for {
		next := pods.Changed()
		want, held, unknown := migmaker.Wanted(pods.List(), node, o.slots())
		if u := strings.Join(unknown, ", "); u != lastUnknown && u != "" {
			log.Warn("pods are booked on MIG instances this node does not make now (its GPUs or settings changed); made ones stay theirs, others are not made and their containers wait", "instances", u)
			lastUnknown = u
		}
		nvml.Lock()
		made, err := o.maker.Reconcile(want, held)
		nvml.Unlock()
		if err != nil {
			log.Warn("MIG on demand", "err", err)
		}
		if made {
			changed()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		case <-clk.After(migRetry):
		}
	}
}

// migRetry is how often the maker tries again what failed.
const migRetry = 5 * time.Second
