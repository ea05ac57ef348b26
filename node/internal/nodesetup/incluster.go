package nodesetup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// InCluster is the node setup that the chart and the manifest run on
// each GPU node, in a privileged init container of vgpud's DaemonSet
// (Install) or of the DaemonSet that removal runs first (Revert).
type InCluster struct {
	Spec      preflight.Spec
	NRISocket string
	// RuntimeSocket is the runtime's own API socket, whose serving
	// process RestartSignal stops.
	RuntimeSocket  string
	Restart        string // RestartNone or RestartSignal
	RestartTimeout time.Duration
	// Binaries are the names the runtime's process may run as; empty:
	// the runtime kind's (containerd, crio).
	Binaries []string
	// Node is this node; its outcome is written there.
	Node  string
	Nodes typedcorev1.NodesGetter
	// The Lease (wellknown.LeaseNodeSetup) held while restarting, by
	// Holder, waited for LeaseWait at most.
	Leases    coordinationv1client.LeasesGetter
	Namespace string
	Holder    string
	LeaseWait time.Duration
	Out       io.Writer
}

func (s InCluster) binaries() []string {
	if len(s.Binaries) > 0 {
		return s.Binaries
	}
	return map[string][]string{preflight.RuntimeContainerd: {"containerd"}, preflight.RuntimeCRIO: {"crio"}}[s.Spec.Runtime]
}

// Install runs preflight, then sets up the node's runtime: its files
// written (unless they fail closed already: an admin's stricter drop-in
// stays), and the runtime restarted where this changed them or it runs
// an older drop-in of vgpud's, holding the Lease. A node that fails
// preflight is labelled failed and left as it was; so is one whose
// runtime does not come back, or not failing closed, with vgpud's
// drop-in, which is then taken back out. The node role then runs and
// reports the runtime as it finds it. An error is a fault worth a retry
// (the apiserver, the Lease).
func (s InCluster) Install(ctx context.Context) error {
	node, err := s.Nodes.Nodes().Get(ctx, s.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s: %w", s.Node, err)
	}
	version := node.Status.NodeInfo.ContainerRuntimeVersion
	if why := s.refused(version); why != "" {
		return s.report(ctx, wellknown.NodeSetupFailed, "preflight refused, nothing was changed: "+why)
	}
	want := runtimecheck.Want(s.NRISocket)
	if v := s.Spec.Check(want); v.Closed() {
		return s.report(ctx, wellknown.NodeSetupDone, fmt.Sprintf("%s (%s) already runs vgpud's drop-in; nothing changed", version, s.Spec.Path))
	}
	if s.Restart == RestartSignal {
		if _, err := servingRuntime(ctx, s.RuntimeSocket, s.binaries()); err != nil {
			return s.report(ctx, wellknown.NodeSetupFailed, "preflight refused, nothing was changed: "+err.Error())
		}
	}
	// Before any file changes, so that a removal running meanwhile
	// reverts this node too.
	if err := s.report(ctx, wellknown.NodeSetupPending, "setting up "+version); err != nil {
		return err
	}
	var applied Applied
	if !s.Spec.Read(want).Closed() {
		applied, err = Install(s.Spec, s.NRISocket)
		for _, n := range applied.Notes {
			fmt.Fprintln(s.Out, "node-setup:", n)
		}
		if err != nil {
			return s.report(ctx, wellknown.NodeSetupFailed, err.Error())
		}
	}
	if v := s.Spec.Check(want); v.Closed() {
		return s.report(ctx, wellknown.NodeSetupDone, fmt.Sprintf("%s already ran these files", version))
	}
	if !applied.Changed && !s.ownDropInUnapplied() {
		return s.report(ctx, wellknown.NodeSetupRestartNeeded, fmt.Sprintf("the files fail closed, but another than vgpud's drop-in changed after %s started: restart it for them to apply (vgpud restarts the runtime only for its own change)", version))
	}
	if s.Restart == RestartNone {
		return s.report(ctx, wellknown.NodeSetupRestartNeeded, fmt.Sprintf("wrote vgpud's drop-in; restart %s for it to apply (nodeSetup.restart is none)", version))
	}
	said, err := s.restart(ctx, func(ctx context.Context) error {
		// NRI's socket is made as the runtime starts with the files.
		return poll(ctx, func() error {
			if v := s.Spec.Check(want); !v.Closed() {
				return fmt.Errorf("after the restart the runtime does not fail closed: %s", strings.Join(v.Problems, "; "))
			}
			return nil
		})
	})
	if err != nil {
		return s.rollBack(ctx, applied, err)
	}
	return s.report(ctx, wellknown.NodeSetupDone, said+" with vgpud's drop-in")
}

// rollBack takes vgpud's change back out after a restart that failed
// (cause), restarts the runtime on the old files where one serves, and
// labels the node failed.
func (s InCluster) rollBack(ctx context.Context, applied Applied, cause error) error {
	msg := cause.Error()
	switch {
	case applied.Undo == nil:
		msg += "; vgpud changed no file this time"
	default:
		if err := applied.Undo(); err != nil {
			msg += "; putting the files back failed: " + err.Error()
			break
		}
		msg += "; vgpud's drop-in was taken back out"
		if _, err := servingPID(ctx, s.RuntimeSocket); err != nil {
			msg += ", for the runtime's next start"
			break
		}
		if said, err := s.restart(ctx, func(context.Context) error { return nil }); err != nil {
			msg += "; restarting the runtime on the old files failed: " + err.Error()
		} else {
			msg += "; " + said + " on the old files"
		}
	}
	return s.report(ctx, wellknown.NodeSetupFailed, msg)
}

// ownDropInUnapplied says whether vgpud's drop-in changed after the
// runtime started (its NRI socket is older, or missing): a change of
// vgpud's that a restart never applied.
func (s InCluster) ownDropInUnapplied() bool {
	path, _ := dropIn(s.Spec)
	f, err := os.Stat(path)
	if err != nil {
		return false
	}
	sock, err := os.Stat(s.NRISocket)
	return err != nil || f.ModTime().After(sock.ModTime())
}

// refused is why preflight refuses to set up a runtime of version (the
// node's containerRuntimeVersion), "" when it does not.
func (s InCluster) refused(version string) string {
	kind, _, _ := strings.Cut(version, "://")
	if want := map[string]string{preflight.RuntimeContainerd: "containerd", preflight.RuntimeCRIO: "cri-o"}[s.Spec.Runtime]; kind != want {
		return fmt.Sprintf("the node runs %q, but nodeSetup is set up for %s (--runtime-config %s:%s)", version, want, s.Spec.Runtime, s.Spec.Path)
	}
	if v := preflight.WithRuntimeVersion(preflight.Verdict{Result: preflight.FailsClosed}, version); !v.Closed() {
		return strings.Join(v.Problems, "; ")
	}
	return ""
}

// Revert removes vgpud's drop-in and restarts the runtime where it still
// runs it, holding the Lease, then takes the outcome off the node. With
// restart none the node says revert-restart-needed instead.
func (s InCluster) Revert(ctx context.Context) error {
	applied, err := Remove(s.Spec)
	for _, n := range applied.Notes {
		fmt.Fprintln(s.Out, "node-setup:", n)
	}
	if err != nil {
		return err
	}
	if (applied.Changed || s.runsOlderFiles()) && s.Restart == RestartNone {
		return s.report(ctx, wellknown.NodeSetupRevertRestartNeeded, "removed vgpud's drop-in; restart the runtime for the removal to apply (nodeSetup.restart is none), then remove this label")
	}
	if applied.Changed || s.runsOlderFiles() {
		said, err := s.restart(ctx, func(context.Context) error { return nil })
		if err != nil {
			return err
		}
		fmt.Fprintln(s.Out, "node-setup:", said+" without vgpud's drop-in")
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{wellknown.LabelNodeSetup: nil},
		"annotations": map[string]any{wellknown.AnnotationNodeSetup: nil},
	}})
	if _, err := s.Nodes.Nodes().Patch(ctx, s.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("take %s off node %s: %w", wellknown.LabelNodeSetup, s.Node, err)
	}
	fmt.Fprintf(s.Out, "node-setup: %s reverted\n", s.Node)
	return nil
}

// runsOlderFiles says whether the runtime started before the drop-in's
// directory last changed (a file removed from it changes it), by its NRI
// socket; false where it has none, and runs no NRI.
func (s InCluster) runsOlderFiles() bool {
	path, _ := dropIn(s.Spec)
	sock, err := os.Stat(s.NRISocket)
	if err != nil {
		return false
	}
	dir, err := os.Stat(filepath.Dir(path))
	return err == nil && dir.ModTime().After(sock.ModTime())
}

// restart restarts the runtime holding the node-setup Lease, then waits
// for ready before it lets the Lease go; it says what it did.
func (s InCluster) restart(ctx context.Context, ready func(context.Context) error) (string, error) {
	var said string
	err := holdLease(ctx, s.Leases, s.Namespace, wellknown.LeaseNodeSetup, s.Holder, s.LeaseWait, s.Out, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeoutCause(ctx, s.RestartTimeout, fmt.Errorf("the runtime did not come back within %s (--restart-timeout)", s.RestartTimeout))
		defer cancel()
		old, now, err := signalRestart(ctx, s.RuntimeSocket, s.binaries(), 200*time.Millisecond)
		if err != nil {
			return err
		}
		said = fmt.Sprintf("restarted the runtime (PID %d, now %d)", old, now)
		fmt.Fprintln(s.Out, "node-setup:", said)
		return ready(ctx)
	})
	return said, err
}

// report writes the outcome on the node, label and message, and prints it.
func (s InCluster) report(ctx context.Context, result, message string) error {
	fmt.Fprintf(s.Out, "node-setup: %s: %s\n", result, message)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{wellknown.LabelNodeSetup: result},
		"annotations": map[string]string{wellknown.AnnotationNodeSetup: message},
	}})
	if _, err := s.Nodes.Nodes().Patch(ctx, s.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("write %s=%s on node %s: %w", wellknown.LabelNodeSetup, result, s.Node, err)
	}
	return nil
}

// poll runs check every 200 ms until it passes or ctx ends.
func poll(ctx context.Context, check func() error) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
	}
}
