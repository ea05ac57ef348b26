package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/cluster/cache"
	"github.com/vgpud/vgpud/protocol"
)

// ghostAge is how long a booking the API shows without a node may stay
// before it is cleared. A bind writes the assignment in its Binding, with
// the node; an assignment without one was left by an older vgpud, whose
// bind wrote the two apart and whose leader died between them.
func ghostAge(bindWait time.Duration) time.Duration { return 2*bindWait + 30*time.Second }

// ghostSweeper clears the assignments of pods that never got a node, so
// their slice is free again and kube-scheduler places them afresh.
type ghostSweeper struct {
	api   corev1client.PodsGetter
	books interface {
		Ghosts(cutoff time.Time) []cache.Ghost
	}
	fence  func() error
	age    time.Duration
	events func(pod *corev1.Pod, reason, message string)
	now    func() time.Time
	log    *slog.Logger
}

// run sweeps every quarter of the age until ctx ends.
func (g ghostSweeper) run(ctx context.Context) error {
	tick := time.NewTicker(g.age / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			g.sweep(ctx)
		}
	}
}

// sweep clears each ghost older than the age, if the API agrees it still
// is one: same UID, no node, and the pod exactly as read (the patch is
// conditional on its resourceVersion).
func (g ghostSweeper) sweep(ctx context.Context) {
	for _, gh := range g.books.Ghosts(g.now().Add(-g.age)) {
		if err := g.clear(ctx, gh); err != nil {
			g.log.Warn("stale assignment not cleared", "pod", gh.Namespace+"/"+gh.Name, "err", err)
		}
	}
}

func (g ghostSweeper) clear(ctx context.Context, gh cache.Ghost) error {
	pods := g.api.Pods(gh.Namespace)
	p, err := pods.Get(ctx, gh.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.UID != gh.UID || p.Spec.NodeName != "" || p.Annotations[protocol.AnnotationAssignment] == "" {
		return nil // not a ghost after all; the informer will catch up
	}
	if err := g.fence(); err != nil {
		return err
	}
	patch := protocol.ClearAssignmentPatch(string(p.UID), p.ResourceVersion)
	if _, err := pods.Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("clear assignment: %w", err)
	}
	msg := fmt.Sprintf("vgpud cleared the GPUs it assigned on %s at %s: the pod never reached that node within %s (a leader stopped between assignment and Binding); kube-scheduler will place it again",
		gh.Node, gh.Since.UTC().Format(time.RFC3339), g.age)
	g.events(p, "StaleAssignmentCleared", msg)
	g.log.Warn("stale assignment cleared", "pod", p.Namespace+"/"+p.Name, "node", gh.Node, "since", gh.Since)
	return nil
}
