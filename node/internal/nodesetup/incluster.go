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

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"

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
	// Node is this node; its outcome is written there, and an outcome
	// that needs a person is also an Event on it (Events may be nil).
	Node   string
	Nodes  typedcorev1.NodesGetter
	Events eventsv1client.EventsGetter
	// The Lease held while restarting (Namespace/Lease), by Holder,
	// waited for LeaseWait at most.
	Leases    coordinationv1client.LeasesGetter
	Namespace string
	Lease     string
	Holder    string
	LeaseWait time.Duration
	Out       io.Writer
}

func (s InCluster) binaries() []string {
	if len(s.Binaries) > 0 {
		return s.Binaries
	}
	return []string{daemon(s.Spec.Runtime)}
}

// Install runs preflight, then sets up the node's runtime: its files
// written (unless they fail closed already: an admin's stricter drop-in
// stays), and the runtime restarted where this changed them or it runs
// an older drop-in of vgpud's. What changes the node happens while this
// node holds the Lease, a failed restart's rollback included, so that no
// other node restarts meanwhile. A node that fails preflight is labelled
// failed and left as it was; so is one whose runtime does not come back,
// or not failing closed, with vgpud's drop-in, which is then taken back
// out. The node role then runs and reports the runtime as it finds it.
// An error (the apiserver, the Lease not had in time) leaves the node as
// it was, labelled pending, for the pod to try again.
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
	if err := s.report(ctx, wellknown.NodeSetupPending, "setting up "+version+": waiting for the "+s.Lease+" Lease"); err != nil {
		return err
	}
	if s.Restart == RestartNone {
		result, message := s.setUp(ctx, version)
		return s.report(ctx, result, message)
	}
	var result, message string
	if err := holdLease(ctx, s.Leases, s.Namespace, s.Lease, s.Holder, s.LeaseWait, s.Out, func(ctx context.Context) error {
		result, message = s.setUp(ctx, version)
		return nil
	}); err != nil {
		return err
	}
	// Said even as the pod is stopped: the node changed.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return s.report(wctx, result, message)
}

// setUp writes the files and restarts the runtime where needed, rolling
// back a restart that fails; it says the outcome.
func (s InCluster) setUp(ctx context.Context, version string) (result, message string) {
	want := runtimecheck.Want(s.NRISocket)
	var applied Applied
	if !s.Spec.Read(want).Closed() {
		var err error
		applied, err = Install(s.Spec, s.NRISocket)
		for _, n := range applied.Notes {
			fmt.Fprintln(s.Out, "node-setup:", n)
		}
		if err != nil {
			return wellknown.NodeSetupFailed, err.Error()
		}
	}
	if v := s.Spec.Check(want); v.Closed() {
		return wellknown.NodeSetupDone, fmt.Sprintf("%s already ran these files", version)
	}
	undo := applied.Undo
	switch {
	case applied.Changed:
	case s.ownDropInUnapplied():
		// vgpud's drop-in, written before and never run: should the
		// runtime not come back with it, it goes.
		undo = func() error { _, err := Remove(s.Spec); return err }
	default:
		return wellknown.NodeSetupRestartNeeded, fmt.Sprintf("the files fail closed, but another than vgpud's drop-in changed after %s started: restart it for them to apply (vgpud restarts the runtime only for its own change)", version)
	}
	if s.Restart == RestartNone {
		return wellknown.NodeSetupRestartNeeded, fmt.Sprintf("wrote vgpud's drop-in; restart %s for it to apply (nodeSetup.restart is none)", version)
	}
	said, sent, err := s.restart(ctx, func(ctx context.Context) error {
		// NRI's socket is made as the runtime starts with the files.
		return poll(ctx, func() error {
			if v := s.Spec.Check(want); !v.Closed() {
				return fmt.Errorf("after the restart the runtime does not fail closed: %s", strings.Join(v.Problems, "; "))
			}
			return nil
		})
	})
	if err == nil {
		return wellknown.NodeSetupDone, said + " with vgpud's drop-in"
	}
	return wellknown.NodeSetupFailed, s.rollBack(ctx, undo, sent, err)
}

// rollBack takes vgpud's change back out after a restart that failed
// (cause) and, where the signal went, restarts the runtime again on the
// old files once one serves: a runtime that started with the drop-in,
// however late, does not keep it. It says what it did.
func (s InCluster) rollBack(ctx context.Context, undo func() error, sent bool, cause error) string {
	msg := cause.Error()
	if err := undo(); err != nil {
		return msg + "; putting the files back failed: " + err.Error()
	}
	msg += "; vgpud's drop-in was taken back out"
	if !sent {
		return msg + "; the runtime was not signalled"
	}
	// Its supervisor may start it late: wait for one to serve (a pod
	// stopped meanwhile still finishes this).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.RestartTimeout)
	defer cancel()
	if err := poll(wctx, func() error { _, err := servingPID(wctx, s.RuntimeSocket); return err }); err != nil {
		return msg + fmt.Sprintf("; no runtime served %s within %s after that: its next start reads the old files", s.RuntimeSocket, s.RestartTimeout)
	}
	said, _, err := s.restart(wctx, func(context.Context) error { return nil })
	if err != nil {
		return msg + "; restarting the runtime on the old files failed: " + err.Error()
	}
	return msg + "; " + said + " on the old files"
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
	// k3s and RKE2 write config.toml anew from this template at each
	// start of their agent, which also runs containerd as its child.
	if tmpl := filepath.Join(filepath.Dir(s.Spec.Path), "config.toml.tmpl"); s.Spec.Runtime == preflight.RuntimeContainerd {
		if _, err := os.Stat(tmpl); err == nil {
			return fmt.Sprintf("%s is generated from %s (k3s, RKE2): vgpud's import would not last; add vgpud's drop-in to that template by hand and set nodeSetup.enabled=false", s.Spec.Path, tmpl)
		}
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
	restart := applied.Changed || s.runsOlderFiles()
	if restart && s.Restart == RestartNone {
		return s.report(ctx, wellknown.NodeSetupRevertRestartNeeded, "removed vgpud's drop-in; restart the runtime for the removal to apply (nodeSetup.restart is none), then remove this label")
	}
	if restart {
		if err := holdLease(ctx, s.Leases, s.Namespace, s.Lease, s.Holder, s.LeaseWait, s.Out, func(ctx context.Context) error {
			said, _, err := s.restart(ctx, func(context.Context) error { return nil })
			if err == nil {
				fmt.Fprintln(s.Out, "node-setup:", said+" without vgpud's drop-in")
			}
			return err
		}); err != nil {
			return err
		}
	}
	// The node role's report of what the node serves goes with vgpud.
	labels := map[string]any{wellknown.LabelNodeSetup: nil}
	for _, k := range wellknown.NodeReportLabels() {
		labels[k] = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      labels,
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

// restart restarts the runtime (the caller holds the node-setup Lease),
// then waits for ready; it says what it did, with when, and whether the
// signal went.
func (s InCluster) restart(ctx context.Context, ready func(context.Context) error) (said string, sent bool, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.RestartTimeout, fmt.Errorf("the runtime did not come back within %s (--restart-timeout)", s.RestartTimeout))
	defer cancel()
	from := time.Now()
	old, now, sent, err := signalRestart(ctx, s.RuntimeSocket, s.binaries())
	if err != nil {
		return "", sent, err
	}
	if err := ready(ctx); err != nil {
		return "", sent, err
	}
	said = fmt.Sprintf("restarted the runtime (PID %d, now %d) from %s to %s", old, now, from.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
	fmt.Fprintln(s.Out, "node-setup:", said)
	return said, true, nil
}

// report writes the outcome on the node, label and message, and prints
// it; one that needs a person (failed, restart-needed) is also a Warning
// Event on the Node, which kubectl describe node shows.
func (s InCluster) report(ctx context.Context, result, message string) error {
	fmt.Fprintf(s.Out, "node-setup: %s: %s\n", result, message)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{wellknown.LabelNodeSetup: result},
		"annotations": map[string]string{wellknown.AnnotationNodeSetup: message},
	}})
	if _, err := s.Nodes.Nodes().Patch(ctx, s.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("write %s=%s on node %s: %w", wellknown.LabelNodeSetup, result, s.Node, err)
	}
	reason := map[string]string{wellknown.NodeSetupFailed: "VgpudNodeSetupFailed", wellknown.NodeSetupRestartNeeded: "VgpudNodeSetupRestartNeeded"}[result]
	if reason == "" || s.Events == nil {
		return nil
	}
	// Best effort: the label said it already.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := time.Now()
	note := message
	if len(note) > 1024 { // the apiserver's limit on an Event's note
		note = note[:1021] + "..."
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", s.Node, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		EventTime:  metav1.NewMicroTime(now),
		// UID the node's name, as kubelet's Node Events have it: kubectl
		// describe node looks for that.
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: s.Node, UID: types.UID(s.Node)},
		Type:                corev1.EventTypeWarning,
		Reason:              reason,
		Action:              "SetUp",
		ReportingController: "vgpud.io/node-setup",
		ReportingInstance:   s.Holder,
		Note:                note,
	}
	if _, err := s.Events.Events(metav1.NamespaceDefault).Create(ectx, ev, metav1.CreateOptions{}); err != nil {
		fmt.Fprintf(s.Out, "node-setup: record an Event on node %s: %v\n", s.Node, err)
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
