package migondemand

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/migmaker"
)

// A node role starting while the one it replaces holds the MIG record
// waits for it a bounded while, then serves without it; its maker takes
// the lock once the old one lets go, and reads what that one wrote.
func TestRecordLockIsBoundedThenTaken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mig-made.json")
	old, err := migmaker.Lock(context.Background(), path, nil, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a wait without bound fails, not hangs
	defer cancel()
	record, err := LockRecord(ctx, Options{MIGRecord: path, MIGOnDemand: []string{"all"}}, 200*time.Millisecond, clock.RealClock{}, log, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond || waited >= 5*time.Second || record.release != nil {
		t.Fatalf("waited %v, held %v: want about 200ms, then on without the lock", waited, record.release != nil)
	}
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig=", "n1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migmaker.Open(path, migmaker.NVML{Lib: lib}, log)
	if err != nil {
		t.Fatal(err)
	}
	// The old one writes its last pass, then lets go.
	devs, _ := gpu.Discover(lib)
	ps, _ := gpu.MIGProfiles(lib, devs[0].UUID)
	cat := migmaker.Catalog(map[string][]gpu.MIGProfile{devs[0].UUID: ps}, func(string) bool { return true })
	var id string
	for k, s := range cat {
		if s.Name == "7g.80gb" {
			id = k
		}
	}
	oldMaker, err := migmaker.Open(path, migmaker.NVML{Lib: lib}, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldMaker.Reconcile(map[string]migmaker.Demand{id: {Slot: cat[id], Pod: "ns/p/u"}}, map[string]string{id: "ns/p/u"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() {
		taken, err := record.take(context.Background(), m, log)
		if err != nil {
			t.Error(err)
		}
		done <- taken
	}()
	select {
	case <-done:
		t.Fatal("took the lock the old one holds")
	case <-time.After(300 * time.Millisecond):
	}
	old()
	select {
	case taken := <-done:
		if !taken || len(m.Entries()) != 1 {
			t.Fatalf("taken %v, record %+v: want it taken and the old one's make read", taken, m.Entries())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lock not taken once the old one let go")
	}
	if taken, err := record.take(context.Background(), m, log); taken || err != nil {
		t.Errorf("again: taken %v, %v; want held already", taken, err)
	}
	record.Release()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if again, err := migmaker.Lock(ctx, path, nil, clock.RealClock{}); err != nil {
		t.Errorf("after Release: %v", err)
	} else {
		again()
	}
}
