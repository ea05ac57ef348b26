package cluster

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/vgpud/vgpud/cluster/internal/extender"
)

// settingsRecheck is how often the leader reads the settings file even
// without a file event: a missed event costs at most this long.
const settingsRecheck = time.Minute

// watchSettings keeps policy at what the settings file says, on top of
// base (the flags), until ctx ends: it reads the file again whenever its
// directory changes (kubelet updates a ConfigMap volume by swapping a
// link there) and every settingsRecheck. A file that does not validate
// changes nothing; the leader logs why and counts it.
// lastErr is the refusal the term started with, "" for none.
func (r *Role) watchSettings(ctx context.Context, policy *extender.Policy, base Config, lastErr string, log *slog.Logger) {
	if base.SettingsFile == "" {
		return
	}
	events := make(<-chan fsnotify.Event)
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("watch the cluster settings file; reading it every minute instead", "file", base.SettingsFile, "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(base.SettingsFile)); err != nil {
			log.Warn("watch the cluster settings file's directory; reading it every minute instead", "file", base.SettingsFile, "err", err)
		} else {
			events = w.Events
		}
	}
	t := r.clock.NewTicker(settingsRecheck)
	defer t.Stop()
	inForce := policy.Get()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
		case <-t.C():
		}
		cfg, err := base.readSettings()
		if err != nil {
			if err.Error() != lastErr {
				lastErr = err.Error()
				log.Error("cluster settings refused; the settings in force stay", "err", err, "inForce", inForce)
				r.metrics.SettingsLoaded(false)
			}
			continue
		}
		lastErr = ""
		if d := cfg.defaults(); d != inForce {
			policy.Set(d)
			log.Info("cluster settings applied", "file", base.SettingsFile, "was", inForce, "now", d)
			inForce = d
			r.metrics.SettingsLoaded(true)
		}
	}
}
