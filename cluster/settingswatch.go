package cluster

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settingsRecheck is how often a replica reads the settings file even
// without a file event: a missed event costs at most this long.
const settingsRecheck = time.Minute

// loadSettings reads the settings file onto the flags and puts what it
// says in force on r.policy, for every term of this process, led or
// still to lead. A file that does not validate changes nothing: what is
// in force stays (the flags', before any good file). lastErr is the last
// refusal said, so that one is logged and counted once.
func (r *Role) loadSettings(log *slog.Logger, lastErr *string) {
	cfg, err := r.cfg.readSettings()
	if err != nil {
		if err.Error() != *lastErr {
			*lastErr = err.Error()
			log.Error("cluster settings refused; the settings in force stay", "err", err, "inForce", r.policy.Get())
			r.metrics.SettingsLoaded(false)
		}
		return
	}
	*lastErr = ""
	if d, was := cfg.defaults(), r.policy.Get(); d != was {
		r.policy.Set(d)
		log.Info("cluster settings applied", "file", r.cfg.SettingsFile, "was", was, "now", d)
		r.metrics.SettingsLoaded(true)
	}
}

// followSettings keeps r.policy at what the settings file says until ctx
// ends, on every replica, so that a new leader starts its term with the
// last good settings, not the flags: it reads the file again whenever
// its directory changes (kubelet updates a ConfigMap volume by swapping a
// link there) and every settingsRecheck.
func (r *Role) followSettings(ctx context.Context, log *slog.Logger, lastErr string) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("watch the cluster settings file; reading it every minute instead", "file", r.cfg.SettingsFile, "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(r.cfg.SettingsFile)); err != nil {
			log.Warn("watch the cluster settings file's directory; reading it every minute instead", "file", r.cfg.SettingsFile, "err", err)
		} else {
			events, errs = w.Events, w.Errors
		}
	}
	// Read once the watch is set: a change just before it counts.
	r.loadSettings(log, &lastErr)
	t := r.clock.NewTicker(settingsRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			// Read, or fsnotify blocks on the next error; the ticker
			// still reads the file.
			log.Warn("watching the cluster settings file", "err", err)
			continue
		case <-events:
		case <-t.C():
		}
		r.loadSettings(log, &lastErr)
	}
}
