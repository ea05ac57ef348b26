package filewatch

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// swap writes body as a new generation of dir's file and swaps the
// ..data link to it, as kubelet updates a ConfigMap volume.
func swap(t *testing.T, dir, gen, body string) {
	t.Helper()
	d := filepath.Join(dir, gen)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "settings.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// Each swap of the link is read, without waiting for the period; the
// period reads again without an event.
func TestFollowReadsEachSwapAndEachPeriod(t *testing.T) {
	dir := t.TempDir()
	swap(t, dir, "gen1", "one")
	path := filepath.Join(dir, "settings.yaml")
	if err := os.Symlink("..data/settings.yaml", path); err != nil {
		t.Fatal(err)
	}
	read := make(chan string, 64)
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(ctx, path, time.Minute, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), func() {
			raw, _ := os.ReadFile(path)
			read <- string(raw)
		})
	}()
	want := func(body string) {
		t.Helper()
		deadline := time.After(5 * time.Second) // fails, rather than hangs
		for {
			select {
			case got := <-read:
				if got == body {
					return
				}
			case <-deadline:
				t.Fatalf("%q never read", body)
			}
		}
	}
	want("one") // the first read: the watch is set
	swap(t, dir, "gen2", "two")
	want("two")
	for len(read) > 0 {
		<-read
	}
	clk.Step(time.Minute)
	want("two") // the period, no event
	cancel()
	<-done
}
