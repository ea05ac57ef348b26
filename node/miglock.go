package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vgpud/vgpud/node/internal/migmaker"
)

// recordWait bounds how long a starting node role waits for the MIG
// record's lock before it reads the GPUs: the pod it replaces drains in
// seconds (its plugin's drainTimeout), and one stuck longer (in a GPU
// call after a fault, or kept by a rollout with maxSurge until this one
// is ready) must not keep the node from serving.
const recordWait = 30 * time.Second

// recordLock is the MIG record's file lock, held by one node role
// process at a time, where the node makes instances on demand.
type recordLock struct {
	path string

	mu      sync.Mutex
	release func() // nil while not held
}

// lockRecord takes the MIG record's lock, where the node makes instances
// on demand, before the GPUs are read: a node role pod replacing another
// (which the DaemonSet starts while the old one drains) then reads the
// GPUs and the record only after the old one's last make or destroy.
// Read before, an instance made in that pass would be listed as the
// operator's. Held until the role stops. After recordWait it goes on
// without, saying so, and the maker takes the lock before its first pass.
func (a *Role) lockRecord(ctx context.Context) error {
	if a.cfg.MIGRecord == "" || len(a.cfg.MIGOnDemand) == 0 {
		return nil
	}
	a.record = &recordLock{path: a.cfg.MIGRecord}
	wctx, cancel := context.WithTimeout(ctx, a.recordWait)
	defer cancel()
	release, err := migmaker.Lock(wctx, a.cfg.MIGRecord, func() {
		why := "waiting for the MIG record, which the node role being replaced still holds"
		a.log.Info(why, "record", a.cfg.MIGRecord, "for at most", a.recordWait)
		a.setNotReady(why)
	})
	switch {
	case err == nil:
		a.record.release = release
		return nil
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		a.log.Warn("the node role being replaced still holds the MIG record; serving without it, and making nothing until it lets go: an instance it makes meanwhile is listed as the operator's until then", "waited", a.recordWait, "record", a.cfg.MIGRecord)
		return nil
	}
	return fmt.Errorf("MIG on demand: %w", err)
}

// take waits for the lock where it is not held yet, then has maker read
// the record as the last holder left it; taken says it did.
func (l *recordLock) take(ctx context.Context, maker *migmaker.Maker, log *slog.Logger) (taken bool, err error) {
	if l == nil {
		return false, nil
	}
	l.mu.Lock()
	held := l.release != nil
	l.mu.Unlock()
	if held {
		return false, nil
	}
	release, err := migmaker.Lock(ctx, l.path, nil)
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
func (l *recordLock) Release() {
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
