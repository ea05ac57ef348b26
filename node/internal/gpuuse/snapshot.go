package gpuuse

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"github.com/vgpud/vgpud/node/internal/inventory"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// Snapshot is inspect's view of the latest sample; nil before the
// GPUs are found.
func (w *Monitor) Snapshot() *inspectv1.GPUUse {
	w.mu.Lock()
	e, rec := w.enforcer, w.rec
	w.mu.Unlock()
	if e == nil {
		return nil
	}
	v, at := e.Last()
	opts := w.options()
	out := &inspectv1.GPUUse{Mode: opts.GPUUsage, Taken: at, Containers: []inspectv1.ContainerUse{}, Unattributed: []inspectv1.ProcessUse{}}
	margin := uint64(opts.GPUUsageMargin) << 20
	stuck := map[string]bool{}
	for _, u := range v.Stuck {
		stuck[u.Container.ID+"/"+u.GPU] = true
	}
	for _, u := range v.Uses {
		c := u.Container
		out.Containers = append(out.Containers, inspectv1.ContainerUse{Namespace: c.Namespace, Pod: c.Pod, Container: c.Name, GPU: u.GPU,
			UsedMiB: u.UsedBytes >> 20, SliceMiB: u.LimitBytes >> 20, Whole: u.Whole, Over: u.Over(margin), Stuck: stuck[c.ID+"/"+u.GPU],
			SMPercent: u.SMPercent, Cores: u.Cores, Processes: len(u.Processes), Kills: rec.kills(c.ID, u.GPU)})
		if u.Pool != "" {
			last := &out.Containers[len(out.Containers)-1]
			last.Claim, last.SharedMiB = u.Claim, u.PoolBytes>>20
		}
	}
	for _, p := range v.Unattributed {
		out.Unattributed = append(out.Unattributed, inspectv1.ProcessUse{GPU: p.GPU, PID: p.PID, UsedMiB: p.UsedBytes >> 20,
			Orphaned: p.Orphaned, Namespace: p.Holder.Namespace, Pod: p.Holder.Pod})
	}
	gpus := map[string]bool{}
	maps.Copy(gpus, v.Full)
	for g, b := range v.Held {
		gpus[g] = gpus[g] || b > 0
	}
	names := map[string][2]string{} // pod UID: namespace, name
	for _, u := range v.Uses {
		names[u.Container.PodUID] = [2]string{u.Container.Namespace, u.Container.Pod}
	}
	for _, p := range v.Unattributed {
		names[p.Holder.PodUID] = [2]string{p.Holder.Namespace, p.Holder.Pod}
	}
	for _, g := range slices.Sorted(maps.Keys(gpus)) {
		if !gpus[g] {
			continue
		}
		h := inspectv1.HeldOnGPU{GPU: g, HeldMiB: v.Held[g] >> 20, Full: v.Full[g]}
		for uid, b := range v.HeldBy[g] {
			h.Pods = append(h.Pods, inspectv1.PodHeld{UID: uid, Namespace: names[uid][0], Pod: names[uid][1], MiB: b >> 20})
		}
		slices.SortFunc(h.Pods, func(x, y inspectv1.PodHeld) int { return cmp.Or(cmp.Compare(y.MiB, x.MiB), cmp.Compare(x.UID, y.UID)) })
		out.GPUs = append(out.GPUs, h)
	}
	for _, end := range e.Ends() {
		out.Ends = append(out.Ends, inspectv1.UsageEnd{Namespace: end.Namespace, Pod: end.Pod, Container: end.Name, GPU: end.GPU, Stage: end.Stage.String()})
	}
	return out
}

// Publish writes the latest sample to the node's vgpud.io/usage
// annotation for `vgpud inspect --cluster`: at most every
// protocol.UsagePublishEvery, and only when it changed by more than
// rounding (64 MiB, 5 % SM), so an idle node writes nothing.
func (w *Monitor) Publish(ctx context.Context, pub *inventory.Publisher) error {
	if w.options().GPUUsage == usage.Off.String() {
		// What an earlier run published would otherwise show for good.
		if err := pub.ClearUsage(ctx); err != nil {
			w.log.Warn("clear GPU usage annotation", "err", err)
		}
		return nil
	}
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.clock.After(protocol.UsagePublishEvery):
		}
		s := w.Snapshot()
		if s == nil || s.Taken.IsZero() {
			continue
		}
		u, same, err := usageValue(s)
		if err != nil {
			w.log.Error("encode GPU usage", "err", err)
			continue
		}
		if same == last {
			continue
		}
		u.Taken = s.Taken
		value, err := protocol.EncodeUsage(u)
		if err == nil {
			err = pub.SetUsage(ctx, value)
		}
		if err != nil {
			w.log.Warn("publish GPU usage", "err", err)
			continue
		}
		last = same
	}
}
