package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"
)

// Watcher waits on NVML XID events for a set of GPUs and tells onChange
// the unhealthy set whenever it changes.
type Watcher struct {
	lib      nvml.Interface
	uuids    []string
	tracker  *Tracker
	onChange func(unhealthy map[string]bool)
	clock    clock.Clock
	log      *slog.Logger
}

// NewWatcher watches uuids on lib; clk dates the XIDs, times the quiet
// periods and the backoff.
func NewWatcher(lib nvml.Interface, uuids []string, t *Tracker, onChange func(map[string]bool), clk clock.Clock, log *slog.Logger) *Watcher {
	return &Watcher{lib: lib, uuids: uuids, tracker: t, onChange: onChange, clock: clk, log: log}
}

// Run watches until ctx ends. A failing wait is logged and retried with
// backoff; it never flips a GPU's health by itself.
func (w *Watcher) Run(ctx context.Context) error {
	// Short waits keep shutdown prompt: an NVML wait cannot be interrupted.
	poll := uint32(min(w.tracker.quiet/4, time.Second).Milliseconds())
	poll = max(poll, 10)
	backoff := time.Second
	for ctx.Err() == nil {
		set, err := w.register()
		if err != nil {
			w.log.Error("cannot watch GPU health; retrying", "err", err, "in", backoff)
			if !w.sleep(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		w.loop(ctx, set, poll)
		set.Free()
	}
	return nil
}

// loop waits on set until ctx ends or the set keeps failing, in which case
// the caller builds a new one.
func (w *Watcher) loop(ctx context.Context, set nvml.EventSet, pollMs uint32) {
	failures := 0
	for ctx.Err() == nil {
		e, ret := set.Wait(pollMs)
		switch ret {
		case nvml.SUCCESS:
			failures = 0
			w.event(e)
		case nvml.ERROR_TIMEOUT:
			failures = 0
		default:
			failures++
			w.log.Error("waiting for NVML events failed; GPU health is unchanged", "err", nvml.ErrorString(ret), "failures", failures)
			if failures >= 5 || !w.sleep(ctx, time.Duration(failures)*time.Second) {
				return
			}
		}
		if rec := w.tracker.Recover(w.clock.Now(), w.probe); len(rec) > 0 {
			w.log.Info("GPUs recovered after a quiet period", "gpus", rec)
			w.onChange(w.tracker.Unhealthy())
		}
	}
}

func (w *Watcher) event(e nvml.EventData) {
	if e.EventType != nvml.EventTypeXidCriticalError {
		return
	}
	uuids := w.uuids
	if e.Device != nil {
		if u, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
			uuids = []string{u}
		}
	}
	// An event NVML cannot tie to a GPU is taken as hitting them all, as
	// NVIDIA's plugin does: better to stop scheduling than to hand out a
	// broken GPU.
	changed := false
	for _, u := range uuids {
		if w.tracker.Observe(u, e.EventData, w.clock.Now()) {
			changed = true
		}
	}
	if !w.tracker.Critical(e.EventData) {
		w.log.Info("ignored XID", "xid", e.EventData, "gpus", uuids)
		return
	}
	w.log.Warn("critical XID: GPU unhealthy", "xid", e.EventData, "gpus", uuids)
	if changed {
		w.onChange(w.tracker.Unhealthy())
	}
}

// probe asks NVML about the GPU the way a workload would.
func (w *Watcher) probe(uuid string) error {
	d, ret := w.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return errors.New(nvml.ErrorString(ret))
	}
	if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
		return errors.New(nvml.ErrorString(ret))
	}
	return nil
}

func (w *Watcher) register() (nvml.EventSet, error) {
	set, ret := w.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("create NVML event set: %s", nvml.ErrorString(ret))
	}
	watched := 0
	for _, u := range w.uuids {
		d, ret := w.lib.DeviceGetHandleByUUID(u)
		if ret != nvml.SUCCESS {
			set.Free()
			return nil, fmt.Errorf("GPU %s: %s", u, nvml.ErrorString(ret))
		}
		supported, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&nvml.EventTypeXidCriticalError == 0 {
			w.log.Warn("GPU does not report XID events; its health is not watched", "gpu", u)
			continue
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			set.Free()
			return nil, fmt.Errorf("GPU %s: register XID events: %s", u, nvml.ErrorString(ret))
		}
		watched++
	}
	if watched == 0 {
		w.log.Warn("no GPU reports XID events; GPU health is not watched", "gpus", len(w.uuids))
	} else {
		w.log.Info("watching GPU health through XID events", "gpus", watched, "of", len(w.uuids))
	}
	return set, nil
}

// sleep waits d, and reports whether ctx is still alive.
func (w *Watcher) sleep(ctx context.Context, d time.Duration) bool {
	t := w.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
