package cluster

// The cluster settings file: the scheduling defaults, which the leader
// reads at the start of each term and again whenever the file changes,
// so that a platform team changes a policy by editing the vgpud
// ConfigMap, with no replica restarted and no device plugin
// re-registered. It holds only settings the leader applies per call;
// the rest stay flags. Its format and rules are configapi's.

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/vgpud/vgpud/internal/configapi"
)

// settingsRecheck is how often a replica reads the settings file even
// without a file event: a missed event costs at most this long.
const settingsRecheck = time.Minute

// FileSettings are the keys cluster-settings.yaml may set, for the docs
// and the chart.
func FileSettings() []configapi.Setting {
	c := DefaultConfig()
	return c.fileSettings()
}

// withSettings is c with the settings in raw applied, checked by the same
// rules as the flags (Validate) and named by their keys. An empty file,
// or one of comments alone, changes nothing.
func (c Config) withSettings(raw []byte) (Config, error) {
	out := c
	if err := configapi.Load(raw, out.fileSettings()); err != nil {
		return c, err
	}
	settings := out.fileSettings()
	var errs []error
	for _, e := range configapi.InFileTerms(out.Validate(), settings) {
		for _, s := range settings {
			if e.Field == s.Key {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return out, nil
}

// readSettings reads the settings file, if c names one, onto c.
func (c Config) readSettings() (Config, error) {
	if c.Settings.ClusterSettingsFile == "" {
		return c, nil
	}
	raw, err := configapi.ReadFile(c.Settings.ClusterSettingsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("cluster settings %s: %w", c.Settings.ClusterSettingsFile, err)
	}
	out, err := c.withSettings(raw)
	if err != nil {
		return c, fmt.Errorf("cluster settings %s: %w", c.Settings.ClusterSettingsFile, err)
	}
	return out, nil
}

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
	if d, was := cfg.Scheduling.Defaults(), r.policy.Get(); d != was {
		r.policy.Set(d)
		log.Info("cluster settings applied", "file", r.cfg.Settings.ClusterSettingsFile, "was", was, "now", d)
		r.metrics.SettingsLoaded(true)
	}
}

// ClaimDefaults are what a container that names no GPU memory or cores
// gets, from c's flags and the settings file as it reads now: a DRA node
// publishes them as its devices' request policies. A file that does not
// read leaves the flags', with the error.
func ClaimDefaults(c Config) (memPercent, cores int, err error) {
	cfg, err := c.readSettings()
	return cfg.Scheduling.DefaultGPUMemPercentage, cfg.Scheduling.DefaultGPUCores, err
}
