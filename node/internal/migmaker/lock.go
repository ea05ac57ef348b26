package migmaker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// lockPoll is how often Lock tries the record's lock again.
const lockPoll = 200 * time.Millisecond

// Lock takes the lock of the record at path, waiting while another
// process holds it (the node role pod being replaced, still draining),
// and calling waiting once if it must. Taken before the GPUs are read
// and the record opened, it keeps what the node lists as made from
// racing the other's last pass. release gives the lock back; Reconcile
// is for a holder.
func Lock(ctx context.Context, path string, waiting func(), clk clock.Clock) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("MIG record lock: %w", err)
	}
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
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
		case <-clk.After(lockPoll):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
