package node

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeLabels reads this node's labels, for per-node overrides that select
// by label. The API may not answer yet at boot, so it retries every
// second until ctx ends.
func (a *Role) nodeLabels(ctx context.Context) (map[string]string, error) {
	for {
		n, err := a.api.Core.Nodes().Get(ctx, a.node, metav1.GetOptions{})
		switch {
		case err == nil:
			return n.Labels, nil
		case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
			// Waiting would not change these: a setting to fix.
			return nil, fmt.Errorf("get node %s: %w", a.node, err)
		}
		a.log.Warn("read this node's labels for the per-node overrides; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("get node %s: %w", a.node, ctx.Err())
		case <-a.clock.After(time.Second):
		}
	}
}
