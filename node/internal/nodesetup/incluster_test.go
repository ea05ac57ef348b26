package nodesetup

//vgpud:wallclock the fake runtime is a real process, started, signalled and started again by the kernel

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A stand-in for the runtime, run as this test binary with
// VGPUD_FAKE_RUNTIME=SOCKET:NRI: it makes its NRI socket (a file: only its
// age is read) as it starts, as containerd does, serves SOCKET, and exits
// on SIGTERM.
func init() {
	spec := os.Getenv("VGPUD_FAKE_RUNTIME")
	if spec == "" {
		return
	}
	sock, nri, _ := strings.Cut(spec, ":")
	// As containerd refusing a configuration it cannot start with.
	if refuse := os.Getenv("VGPUD_FAKE_RUNTIME_REFUSES"); refuse != "" {
		if _, err := os.Stat(refuse); err == nil {
			os.Exit(1)
		}
	}
	_ = os.Remove(sock)
	if err := os.WriteFile(nri, nil, 0o600); err != nil {
		os.Exit(3)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.Exit(3)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	<-stop
	l.Close()
	os.Exit(0)
}

// supervise runs the fake runtime, and again whenever it exits, as
// systemd's Restart=always, until the test ends; it counts the starts.
func supervise(t *testing.T, sock, nri string, env ...string) *atomic.Int32 {
	t.Helper()
	var starts atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var cur atomic.Pointer[exec.Cmd]
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(append(os.Environ(), "VGPUD_FAKE_RUNTIME="+sock+":"+nri), env...)
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			cur.Store(cmd)
			starts.Add(1)
			_ = cmd.Wait()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		cancel()
		if c := cur.Load(); c != nil {
			_ = c.Process.Kill()
		}
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := servingPID(context.Background(), sock); err == nil {
			return &starts
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake runtime never served its socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func node(version string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	n.Status.NodeInfo.ContainerRuntimeVersion = version
	return n
}

func setupCase(t *testing.T, version string, env ...string) (InCluster, *fake.Clientset, *atomic.Int32, string) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "config.toml"), []byte("version = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock, nri := filepath.Join(dir, "runtime.sock"), filepath.Join(dir, "nri.sock")
	for i, e := range env {
		env[i] = strings.ReplaceAll(e, "DIR", dir)
	}
	starts := supervise(t, sock, nri, env...)
	kube := fake.NewSimpleClientset(node(version))
	s := InCluster{
		Spec: preflight.Spec{Runtime: preflight.RuntimeContainerd, Path: filepath.Join(etc, "config.toml")}, NRISocket: nri,
		RuntimeSocket: sock, Restart: RestartSignal, RestartTimeout: 20 * time.Second, Binaries: []string{filepath.Base(os.Args[0])},
		Node: "n1", Nodes: kube.CoreV1(), Events: kube.EventsV1(), Leases: kube.CoordinationV1(), Namespace: "vgpud-system", Lease: wellknown.LeaseNodeSetup, Holder: "vgpud-abcde", LeaseWait: time.Minute,
		Out: io.Discard,
	}
	return s, kube, starts, filepath.Join(etc, "conf.d", "vgpud.toml")
}

func outcome(t *testing.T, kube *fake.Clientset) (label, message string, labelled bool) {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	label, labelled = n.Labels[wellknown.LabelNodeSetup]
	return label, n.Annotations[wellknown.AnnotationNodeSetup], labelled
}

// The init container sets a node up, restarting its runtime once, finds
// it set up the next time and restarts nothing, and the revert restarts
// it once more without the drop-in and takes the label off.
func TestInClusterInstallRestartsOnceThenRevert(t *testing.T) {
	s, kube, starts, dropIn := setupCase(t, "containerd://2.4.2")
	ctx := context.Background()
	if err := s.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if label, msg, _ := outcome(t, kube); label != wellknown.NodeSetupDone || !strings.Contains(msg, "restarted the runtime") {
		t.Fatalf("after the first install: %s=%q, %q", wellknown.LabelNodeSetup, label, msg)
	}
	if n := starts.Load(); n != 2 {
		t.Fatalf("the runtime started %d times, want 2 (one restart)", n)
	}
	if _, err := os.Stat(dropIn); err != nil {
		t.Fatal(err)
	}
	if l, err := kube.CoordinationV1().Leases("vgpud-system").Get(ctx, wellknown.LeaseNodeSetup, metav1.GetOptions{}); err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "" {
		t.Fatalf("the node-setup Lease after the restart: %+v, %v; want it released", l, err)
	}
	// Again (a reboot, an upgrade): nothing to do.
	if err := s.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if label, msg, _ := outcome(t, kube); label != wellknown.NodeSetupDone || !strings.Contains(msg, "nothing changed") || starts.Load() != 2 {
		t.Fatalf("the second install: %s=%q, %q, %d starts; want no restart", wellknown.LabelNodeSetup, label, msg, starts.Load())
	}
	if err := s.Revert(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the drop-in after the revert: %v", err)
	}
	if _, _, labelled := outcome(t, kube); labelled || starts.Load() != 3 {
		t.Fatalf("after the revert: labelled %v, %d starts; want no label and one more restart", labelled, starts.Load())
	}
	// A revert again finds nothing to do.
	if err := s.Revert(ctx); err != nil || starts.Load() != 3 {
		t.Fatalf("a second revert: %v, %d starts", err, starts.Load())
	}
}

// A runtime that cannot fail closed, or another runtime than the one set
// up for, is labelled failed with the reason, and nothing is written or
// restarted; restart none writes and says so.
func TestInClusterPreflightAndRestartNone(t *testing.T) {
	for _, tc := range []struct{ version, label, says string }{
		{"containerd://2.1.4", wellknown.NodeSetupFailed, "no default validator"},
		{"containerd://1.6.20", wellknown.NodeSetupFailed, "no default validator"},
		{"cri-o://1.34.1", wellknown.NodeSetupFailed, "set up for containerd"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			s, kube, starts, dropIn := setupCase(t, tc.version)
			if err := s.Install(context.Background()); err != nil {
				t.Fatal(err)
			}
			label, msg, _ := outcome(t, kube)
			if label != tc.label || !strings.Contains(msg, tc.says) || !strings.Contains(msg, "nothing was changed") {
				t.Errorf("%s=%q, %q; want %s saying %q", wellknown.LabelNodeSetup, label, msg, tc.label, tc.says)
			}
			if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) || starts.Load() != 1 {
				t.Errorf("refused, yet the drop-in %v, %d starts", err, starts.Load())
			}
			// Reported where kubectl describe node shows it.
			evs, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
			if err != nil || len(evs.Items) != 1 || evs.Items[0].Reason != "VgpudNodeSetupFailed" || evs.Items[0].Regarding.Name != "n1" || !strings.Contains(evs.Items[0].Note, tc.says) {
				t.Errorf("Events on the node: %+v, %v; want one VgpudNodeSetupFailed saying %q", evs, err, tc.says)
			}
		})
	}
	t.Run("restart none", func(t *testing.T) {
		s, kube, starts, dropIn := setupCase(t, "containerd://2.4.2")
		s.Restart = RestartNone
		if err := s.Install(context.Background()); err != nil {
			t.Fatal(err)
		}
		if label, _, _ := outcome(t, kube); label != wellknown.NodeSetupRestartNeeded || starts.Load() != 1 {
			t.Errorf("%s=%q, %d starts; want %s and no restart", wellknown.LabelNodeSetup, label, starts.Load(), wellknown.NodeSetupRestartNeeded)
		}
		if _, err := os.Stat(dropIn); err != nil {
			t.Error(err)
		}
	})
}

// A socket served by another program than the runtime is refused before
// anything changes; a runtime that does not come back with vgpud's
// drop-in gets the files back as they were and the node says failed.
func TestInClusterNeverBreaksTheRuntime(t *testing.T) {
	t.Run("another program serves the socket", func(t *testing.T) {
		s, kube, starts, dropIn := setupCase(t, "containerd://2.4.2")
		s.Binaries = nil // containerd, which the test binary is not
		if err := s.Install(context.Background()); err != nil {
			t.Fatal(err)
		}
		if label, msg, _ := outcome(t, kube); label != wellknown.NodeSetupFailed || !strings.Contains(msg, "not containerd") {
			t.Errorf("%s=%q, %q", wellknown.LabelNodeSetup, label, msg)
		}
		if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) || starts.Load() != 1 {
			t.Errorf("refused, yet the drop-in %v, %d starts", err, starts.Load())
		}
	})
	t.Run("the runtime does not start with the drop-in", func(t *testing.T) {
		s, kube, starts, dropIn := setupCase(t, "containerd://2.4.2", "VGPUD_FAKE_RUNTIME_REFUSES=DIR/etc/conf.d/vgpud.toml")
		s.RestartTimeout = 2 * time.Second
		if err := s.Install(context.Background()); err != nil {
			t.Fatal(err)
		}
		label, msg, _ := outcome(t, kube)
		if label != wellknown.NodeSetupFailed || !strings.Contains(msg, "did not come back") || !strings.Contains(msg, "taken back out") {
			t.Errorf("%s=%q, %q; want failed, the drop-in taken back out", wellknown.LabelNodeSetup, label, msg)
		}
		if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the drop-in after the rollback: %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := servingPID(context.Background(), s.RuntimeSocket); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the runtime does not serve again on the old files (%d starts)", starts.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// vgpud's drop-in written before and never run (a restart left to
// someone, a pod stopped before its restart), with which the runtime
// does not start: it goes again, and the runtime serves on the old files.
func TestInClusterRollsBackAnEarlierDropIn(t *testing.T) {
	s, kube, _, dropIn := setupCase(t, "containerd://2.4.2", "VGPUD_FAKE_RUNTIME_REFUSES=DIR/etc/conf.d/vgpud.toml")
	s.RestartTimeout = 2 * time.Second
	if _, err := Install(s.Spec, s.NRISocket); err != nil {
		t.Fatal(err)
	}
	if err := s.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if label, msg, _ := outcome(t, kube); label != wellknown.NodeSetupFailed || !strings.Contains(msg, "taken back out") {
		t.Errorf("%s=%q, %q; want failed, the drop-in taken back out", wellknown.LabelNodeSetup, label, msg)
	}
	if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier drop-in after the rollback: %v", err)
	}
}

// With the Lease held elsewhere past --lease-wait nothing changes: the
// error names the holder, the node stays pending for the pod to try
// again.
func TestInClusterGivesUpOnAHeldLease(t *testing.T) {
	s, kube, starts, dropIn := setupCase(t, "containerd://2.4.2")
	s.LeaseWait = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan struct{})
	go func() {
		_ = holdLease(ctx, kube.CoordinationV1(), s.Namespace, wellknown.LeaseNodeSetup, "vgpud-other", time.Minute, io.Discard, func(ctx context.Context) error {
			close(held)
			<-ctx.Done()
			return nil
		})
	}()
	<-held
	err := s.Install(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"vgpud-other"`) {
		t.Fatalf("Install with the Lease held elsewhere: %v; want an error naming vgpud-other", err)
	}
	if label, _, _ := outcome(t, kube); label != wellknown.NodeSetupPending {
		t.Errorf("%s=%q, want pending", wellknown.LabelNodeSetup, label)
	}
	if _, err := os.Stat(dropIn); !errors.Is(err, os.ErrNotExist) || starts.Load() != 1 {
		t.Errorf("gave up, yet the drop-in %v, %d starts", err, starts.Load())
	}
}

// wait-reverted ends once no node is labelled, and fails naming a node
// whose runtime still runs the drop-in, or one left after its timeout.
func TestWaitReverted(t *testing.T) {
	labelled := func(name, value string) *corev1.Node {
		n := node("containerd://2.4.2")
		n.Name = name
		if value != "" {
			n.Labels = map[string]string{wellknown.LabelNodeSetup: value}
		}
		return n
	}
	ctx := context.Background()
	if err := WaitReverted(ctx, fake.NewSimpleClientset(labelled("a", ""), labelled("b", "")).CoreV1(), time.Second, 10*time.Millisecond, io.Discard); err != nil {
		t.Errorf("no node labelled: %v", err)
	}
	err := WaitReverted(ctx, fake.NewSimpleClientset(labelled("a", wellknown.NodeSetupRevertRestartNeeded)).CoreV1(), time.Second, 10*time.Millisecond, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "restart the runtime") {
		t.Errorf("a node whose runtime was not restarted: %v", err)
	}
	err = WaitReverted(ctx, fake.NewSimpleClientset(labelled("a", wellknown.NodeSetupDone)).CoreV1(), 100*time.Millisecond, 10*time.Millisecond, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "a (done, not Ready)") {
		t.Errorf("a node never reverted: %v", err)
	}
	// Stopped (SIGTERM) while a node is left: neither done nor a verdict.
	stopped, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	err = WaitReverted(stopped, fake.NewSimpleClientset(labelled("a", wellknown.NodeSetupDone)).CoreV1(), time.Minute, 10*time.Millisecond, io.Discard)
	if !errors.Is(err, ErrInterrupted) || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "a (done, not Ready)") {
		t.Errorf("stopped while a node is left: %v; want ErrInterrupted naming it, not context.Canceled", err)
	}
}
