package exepages

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
)

func TestAfterReleasesOnceItsTimeComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		log := slog.New(slog.NewTextHandler(&out, nil))
		done := make(chan struct{})
		go func() {
			After(context.Background(), clock.RealClock{}, 30*time.Second, log)
			close(done)
		}()
		<-time.After(29 * time.Second) // the bubble's clock
		synctest.Wait()
		select {
		case <-done:
			t.Fatalf("released before its time: %s", out.String())
		default:
		}
		<-time.After(time.Second)
		<-done
		if !strings.Contains(out.String(), "handed the binary's start-up pages back") || !strings.Contains(out.String(), "rss_after_bytes=") {
			t.Fatalf("logged %q, want the release and the RSS after it", out.String())
		}
	})
}

func TestAfterReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	After(ctx, clock.RealClock{}, time.Hour, slog.New(slog.NewTextHandler(&out, nil)))
	if out.Len() != 0 {
		t.Fatalf("logged %q after the context ended, want nothing", out.String())
	}
}
