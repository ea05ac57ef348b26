package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// ErrInterrupted is WaitReverted stopped (its pod stopped) before every
// node was reverted: neither a success nor a verdict, so that whatever
// runs it may try again.
var ErrInterrupted = errors.New("stopped before every node was reverted")

// WaitReverted waits until no node carries vgpud.io/node-setup, which
// each node's revert takes off, polling every poll, and fails where a
// revert could not restart the runtime (revert-restart-needed): the chart's
// pre-delete hook, so that nothing else of vgpud is removed while a node
// still needs it. It gives up after timeout naming the nodes left, and
// which of them are not Ready (a node gone or down cannot revert).
func WaitReverted(ctx context.Context, nodes typedcorev1.NodesGetter, timeout, poll time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	said := ""
	for {
		list, err := nodes.Nodes().List(ctx, metav1.ListOptions{LabelSelector: wellknown.LabelNodeSetup})
		var left, restart []string
		if err == nil {
			for _, n := range list.Items {
				state := n.Labels[wellknown.LabelNodeSetup]
				if state == wellknown.NodeSetupRevertRestartNeeded {
					restart = append(restart, n.Name)
					continue
				}
				if !ready(n) {
					state += ", not Ready"
				}
				left = append(left, n.Name+" ("+state+")")
			}
			slices.Sort(left)
			slices.Sort(restart)
			if len(left) == 0 && len(restart) > 0 {
				// Their runtime runs vgpud's drop-in until restarted: a
				// removal now would leave them refusing pods vgpud marked.
				return fmt.Errorf("vgpud's drop-in is gone from %s, but the runtime there runs it until restarted (nodeSetup.restart is none): restart the runtime on each, kubectl label node NODE %s-, then remove vgpud again", strings.Join(restart, ", "), wellknown.LabelNodeSetup)
			}
			if len(left) == 0 {
				fmt.Fprintln(out, "node-setup: every node is reverted")
				return nil
			}
			if now := strings.Join(left, ", "); now != said {
				said = now
				fmt.Fprintln(out, "node-setup: waiting for the revert of", now)
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("%w; left: %s", ErrInterrupted, strings.Join(slices.Concat(left, restart), ", "))
			}
			if err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			return fmt.Errorf("after %s these nodes still carry %s: %s. Each is reverted by the node-revert DaemonSet's pod on it (kubectl -n NAMESPACE logs ds/vgpud-node-revert -c node-revert; the chart's fullnameOverride, if set, replaces vgpud); a node that cannot run it: delete vgpud's drop-in there (conf.d/vgpud.toml in containerd's configuration directory, crio.conf.d/90-vgpud.conf in CRI-O's), restart the runtime, then kubectl label node NODE %s-", timeout, wellknown.LabelNodeSetup, strings.Join(left, ", "), wellknown.LabelNodeSetup)
		case <-t.C:
		}
	}
}

func ready(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
