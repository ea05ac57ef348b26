// Package filewatch follows a file kubelet keeps as a ConfigMap volume,
// where an update is a new directory and a link swapped beside the file:
// it watches the file's directory, and reads again every period besides,
// so that a missed event costs at most that long.
package filewatch

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Follow calls load once the watch on path's directory is set (a change
// just before it counts), then whenever the directory changes and every
// period, until ctx ends. Without a watch it reads every period alone.
func Follow(ctx context.Context, path string, period time.Duration, clk clock.WithTicker, log *slog.Logger, load func()) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("watch a settings file; reading it every period instead", "file", path, "period", period, "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(path)); err != nil {
			log.Warn("watch a settings file's directory; reading it every period instead", "file", path, "period", period, "err", err)
		} else {
			events, errs = w.Events, w.Errors
		}
	}
	load()
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			// Read, or fsnotify blocks on the next error; the ticker
			// still reads the file.
			log.Warn("watching a settings file", "file", path, "err", err)
			continue
		case <-events:
		case <-t.C():
		}
		load()
	}
}
