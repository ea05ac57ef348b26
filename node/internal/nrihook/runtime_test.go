//vgpud:wallclock the hook connects over a real unix socket to NRI's own runtime side, served by its goroutines.

package nrihook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
)

// Against NRI's own runtime side: once Run returns after its context
// ended, the connection stays open and refuses, so the runtime fails the
// create. Had the hook closed, the runtime would take its call as no
// answer and create the container unadjusted.
func TestADrainedHookStillRefusesAfterRunReturns(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	rt, err := adaptation.New("test-runtime", "v0", sync, update, adaptation.WithSocketPath(socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "conf")))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()

	h, _ := testHook()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, socket) }()
	deadline := time.Now().Add(10 * time.Second)
	for up, _ := h.Connected(); !up; up, _ = h.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the hook did not connect to the runtime")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(2 * drainMax):
		t.Fatalf("Run still running %v after its context ended", 2*drainMax)
	}
	_, err = rt.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{
		Pod:       &adaptation.PodSandbox{Id: "sb", Name: "p", Uid: "uid-1", Namespace: "ns"},
		Container: &adaptation.Container{Id: "c", PodSandboxId: "sb", Name: "main"},
	})
	if err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("the runtime's create after Run returned: %v; want the hook's refusal", err)
	}
}
