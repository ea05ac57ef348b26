package migmaker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often Lock tries the record's lock again.
const lockPoll = 200 * time.Millisecond

// Lock takes the record's lock, waiting while another process holds it
// (the node role pod being replaced, still draining), then reads the
// record again: from then on this maker alone writes it, from what the
// other left. release gives the lock back; Reconcile is for a holder.
func (m *Maker) Lock(ctx context.Context, waiting func()) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(m.path), 0o700); err != nil {
		return nil, fmt.Errorf("MIG record lock: %w", err)
	}
	f, err := os.OpenFile(m.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("MIG record lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("MIG record lock: %w", err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
	release = func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
	entries, err := load(m.path)
	if err != nil {
		release()
		return nil, err
	}
	m.mu.Lock()
	m.entries = entries
	m.mu.Unlock()
	return release, nil
}
