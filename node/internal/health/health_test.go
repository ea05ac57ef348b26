package health

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := NewTracker(DefaultIgnoredXIDs, time.Minute)
	ok := func(string) error { return nil }
	if tr.Observe("a", 13, t0) || tr.Observe("a", 43, t0) {
		t.Fatal("an ignored XID made a GPU unhealthy")
	}
	if !tr.Observe("a", 79, t0) {
		t.Fatal("XID 79 did not make the GPU unhealthy")
	}
	if tr.Observe("a", 48, t0.Add(30*time.Second)) {
		t.Error("a second XID on an unhealthy GPU reported a change")
	}
	if got := tr.Recover(t0.Add(80*time.Second), ok); len(got) != 0 {
		t.Errorf("recovered %v before the quiet period after the last XID", got)
	}
	if got := tr.Recover(t0.Add(91*time.Second), func(string) error { return errors.New("GPU is lost") }); len(got) != 0 {
		t.Errorf("recovered %v while NVML fails", got)
	}
	if !tr.Unhealthy()["a"] {
		t.Error("GPU a should still be unhealthy")
	}
	if got := tr.Recover(t0.Add(91*time.Second), ok); len(got) != 1 || got[0] != "a" {
		t.Errorf("Recover = %v, want [a]", got)
	}
	if len(tr.Unhealthy()) != 0 {
		t.Errorf("unhealthy after recovery: %v", tr.Unhealthy())
	}
}

func TestWatcherRoundTrip(t *testing.T) {
	lib, err := gpu.Open("mock:dgxa100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	uuids := make([]string, len(devs))
	for i, d := range devs {
		uuids[i] = d.UUID
	}
	changes := make(chan map[string]bool, 10)
	w := NewWatcher(lib, uuids, NewTracker(DefaultIgnoredXIDs, 300*time.Millisecond), func(u map[string]bool) { changes <- u }, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)

	m := lib.(*gpu.Mock)
	victim := uuids[2]
	must(t, m.InjectXID(victim, 13)) // ignored: no change may follow
	must(t, m.SetFailing(victim, true))
	must(t, m.InjectXID(victim, 79))
	start := time.Now()
	if got := next(t, changes); len(got) != 1 || !got[victim] {
		t.Fatalf("after XID 79: unhealthy = %v, want only %s", got, victim)
	}
	// While NVML fails for it, the GPU stays unhealthy past the quiet period.
	select {
	case got := <-changes:
		t.Fatalf("changed to %v while NVML fails", got)
	case <-time.After(700 * time.Millisecond):
	}
	must(t, m.SetFailing(victim, false))
	if got := next(t, changes); len(got) != 0 {
		t.Fatalf("after recovery: unhealthy = %v", got)
	}
	t.Logf("unhealthy -> healthy round trip: %v (quiet period 300ms, NVML failing for 700ms of it)", time.Since(start).Round(time.Millisecond))
}

func next(t *testing.T, c chan map[string]bool) map[string]bool {
	t.Helper()
	select {
	case u := <-c:
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no health change within 5s")
		return nil
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatcherWaitFailureFlipsNothing: when NVML's event wait itself fails,
// the error is logged and retried, and no GPU changes health. The
// watcher's backoff passes on the bubble's clock.
func TestWatcherWaitFailureFlipsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lib, err := gpu.Open("mock:dgxa100", "n1")
		if err != nil {
			t.Fatal(err)
		}
		m := lib.(*gpu.Mock)
		var waits atomic.Int32
		m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { waits.Add(1); return nvml.EventData{}, nvml.ERROR_UNKNOWN },
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		}
		var logged bytes.Buffer
		var mu sync.Mutex
		changes := make(chan map[string]bool, 10)
		devs, err := gpu.Discover(lib)
		if err != nil {
			t.Fatal(err)
		}
		w := NewWatcher(lib, []string{devs[0].UUID}, NewTracker(DefaultIgnoredXIDs, time.Second), func(u map[string]bool) { changes <- u }, clock.RealClock{}, slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, nil)))
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		w.Run(ctx)
		select {
		case u := <-changes:
			t.Fatalf("health changed to %v on a failing wait", u)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if waits.Load() < 2 || !strings.Contains(logged.String(), "GPU health is unchanged") {
			t.Errorf("%d waits; log:\n%s", waits.Load(), logged.String())
		}
	})
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
