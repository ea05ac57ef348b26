package kubeletwatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatchSeesKubeletRestartAndOwnSocketRemoval(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "vgpud.sock")
	if err := os.WriteFile(own, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := New(dir, "vgpud.sock")
	if err != nil {
		t.Fatal(err)
	}
	// The directory is watched from here: Run reports what follows.
	events := make(chan Event, 4)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, events) }()

	next := func(want Event) {
		t.Helper()
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("event %q, want %q", got, want)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("no %q event", want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "other.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	next(KubeletRestarted) // other.sock was ignored
	if err := os.Remove(own); err != nil {
		t.Fatal(err)
	}
	next(SocketRemoved)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWatchMissingDir(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "nope"), "vgpud.sock"); err == nil {
		t.Fatal("want an error for a missing directory")
	}
}
