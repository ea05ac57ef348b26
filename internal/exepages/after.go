package exepages

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"
)

// After waits d, so that the roles' own start-up has run, then calls
// release (Release, but for tests) and logs what it did; it returns early
// when ctx ends.
func After(ctx context.Context, clk clock.Clock, d time.Duration, release func() (Stats, error), log *slog.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-clk.After(d):
	}
	st, err := release()
	if err != nil {
		log.Info("handing the binary's start-up pages back stopped short", "err", err, "rss_before_bytes", st.Before, "rss_after_bytes", st.After)
		return
	}
	log.Info("handed the binary's start-up pages back to the kernel", "rss_before_bytes", st.Before, "rss_after_bytes", st.After)
}
