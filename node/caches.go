package node

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/node/internal/grant"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Where the node guesses, each GPU container's interposer cache is a
// host directory (grant.Slice.CacheDir). These remove a pod's once it is
// gone: every minute, and only after the node's pods are known, those
// of no live pod that have sat unchanged two minutes.
const (
	sweepEvery = time.Minute
	sweepGrace = 2 * time.Minute
)

func (a *Role) sweepCaches(ctx context.Context, pods *nodepods.Index) {
	if !pods.WaitForSync(ctx) {
		return
	}
	for {
		live := map[types.UID]bool{}
		for _, p := range pods.List() {
			if !podmodel.Terminated(p) {
				live[p.UID] = true
			}
		}
		removed, err := grant.SweepCaches(a.cfg.InterposerDir, func(uid types.UID) bool { return live[uid] }, sweepGrace, a.clock.Now())
		if err != nil {
			a.log.Warn("sweep the interposer's caches", "err", err)
		}
		if len(removed) > 0 {
			a.log.Info("removed the interposer caches of pods gone", "containers", removed)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(sweepEvery):
		}
	}
}
