package migondemand

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/migmaker"
)

// RecordWait bounds how long a starting node role waits for the MIG
// record's lock before it reads the GPUs: the pod it replaces drains in
// seconds (its plugin's drainTimeout), and one stuck longer (in a GPU
// call after a fault, or kept by a rollout with maxSurge until this one
// is ready) must not keep the node from serving.
const RecordWait = 30 * time.Second

// errWaited ends a wait for the record's lock that took its time.
var errWaited = errors.New("waited long enough for the MIG record")

// RecordLock is the MIG record's file lock, held by one node role
// process at a time, where the node makes instances on demand.
type RecordLock struct {
	path  string
	clock clock.Clock

	mu      sync.Mutex
	release func() // nil while not held
}

// LockRecord takes the MIG record's lock, where the node makes instances
// on demand, before the GPUs are read: a node role pod replacing another
// (which the DaemonSet starts while the old one drains) then reads the
// GPUs and the record only after the old one's last make or destroy.
// Read before, an instance made in that pass would be listed as the
// operator's. Held until the role stops. After wait it goes on without,
// saying so (waiting is told why it waits), and the maker takes the
// lock before its first pass. nil where nothing is made.
func LockRecord(ctx context.Context, opts Options, wait time.Duration, clk clock.Clock, log *slog.Logger, waiting func(why string)) (*RecordLock, error) {
	if opts.MIGRecord == "" || len(opts.MIGOnDemand) == 0 {
		return nil, nil
	}
	l := &RecordLock{path: opts.MIGRecord, clock: clk}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := clk.NewTimer(wait)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			cancel(errWaited)
		case <-wctx.Done():
		}
	}()
	release, err := migmaker.Lock(wctx, opts.MIGRecord, func() {
		why := "waiting for the MIG record, which the node role being replaced still holds"
		log.Info(why, "record", opts.MIGRecord, "for at most", wait)
		waiting(why)
	}, clk)
	switch {
	case err == nil:
		l.release = release
		return l, nil
	case ctx.Err() != nil:
		return l, nil
	case errors.Is(context.Cause(wctx), errWaited):
		log.Warn("the node role being replaced still holds the MIG record; serving without it, and making nothing until it lets go: an instance it makes meanwhile is listed as the operator's until then", "waited", wait, "record", opts.MIGRecord)
		return l, nil
	}
	return nil, fmt.Errorf("MIG on demand: %w", err)
}

// take waits for the lock where it is not held yet, then has maker read
// the record as the last holder left it; taken says it did.
func (l *RecordLock) take(ctx context.Context, maker *migmaker.Maker, log *slog.Logger) (taken bool, err error) {
	if l == nil {
		return false, nil
	}
	l.mu.Lock()
	held := l.release != nil
	l.mu.Unlock()
	if held {
		return false, nil
	}
	release, err := migmaker.Lock(ctx, l.path, nil, l.clock)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("MIG on demand: %w", err)
	}
	if err := maker.Reload(); err != nil {
		release()
		return false, fmt.Errorf("MIG on demand: %w", err)
	}
	l.mu.Lock()
	l.release = release
	l.mu.Unlock()
	log.Info("took the MIG record over from the node role replaced", "record", l.path)
	return true, nil
}

// Release gives the lock back, if held.
func (l *RecordLock) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.release != nil {
		l.release()
		l.release = nil
	}
}
