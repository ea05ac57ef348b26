package exepages

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
)

func TestAfterReleasesWhenItsTimeComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		log := slog.New(slog.NewTextHandler(&out, nil))
		released := 0
		release := func() (Stats, error) { released++; return Stats{Before: 48 << 20, After: 12 << 20}, nil }
		done := make(chan struct{})
		go func() {
			After(context.Background(), clock.RealClock{}, 30*time.Second, release, log)
			close(done)
		}()
		<-time.After(29 * time.Second) // the bubble's clock
		synctest.Wait()
		if released != 0 {
			t.Fatalf("released %d times before its time", released)
		}
		<-time.After(time.Second)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("not released 30 s in")
		}
		if released != 1 || !strings.Contains(out.String(), "handed the binary's start-up pages back") || !strings.Contains(out.String(), "rss_after_bytes=12582912") {
			t.Fatalf("released %d times, logged %q; want once, with the RSS after it", released, out.String())
		}
	})
}

func TestAfterSaysWhenTheReleaseStoppedShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		release := func() (Stats, error) {
			return Stats{Before: 48 << 20, After: 30 << 20}, errors.New("madvise(MADV_PAGEOUT) on /usr/bin/vgpud [0x1, 0x2), mapping 2 of 3: invalid argument")
		}
		After(context.Background(), clock.RealClock{}, time.Second, release, slog.New(slog.NewTextHandler(&out, nil)))
		if !strings.Contains(out.String(), "stopped short") || !strings.Contains(out.String(), "mapping 2 of 3") || !strings.Contains(out.String(), "rss_after_bytes=31457280") {
			t.Fatalf("logged %q; want the error and the RSS after it", out.String())
		}
	})
}

func TestAfterReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	release := func() (Stats, error) { t.Fatal("released after the context ended"); return Stats{}, nil }
	After(ctx, clock.RealClock{}, time.Hour, release, slog.New(slog.NewTextHandler(&out, nil)))
	if out.Len() != 0 {
		t.Fatalf("logged %q after the context ended, want nothing", out.String())
	}
}
