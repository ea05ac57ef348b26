package usage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrMoved is a kill not made because the PID no longer runs in the
// container it was attributed to: it ended, and the PID may be reused.
var ErrMoved = errors.New("the process is no longer in that container")

// Kill ends process pid of container id with SIGKILL. It holds the
// process by a pidfd first, then checks its cgroup and its start time
// (when start is not 0), so the signal reaches the process that was
// checked or none: never another that reused the PID, in this container
// or another, between the sample and the kill.
func (p Procfs) Kill(pid int, id string, start uint64) error {
	fd, err := p.hold(pid, id, start)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("process %d: %w", pid, ErrMoved)
		}
		return fmt.Errorf("kill process %d: %w", pid, err)
	}
	return nil
}

// hold opens a pidfd on pid, then checks that it runs in container id
// and, where start is not 0, that it started then; the caller closes the
// pidfd. While it is open no other process has the PID, so the checks
// read the held one.
func (p Procfs) hold(pid int, id string, start uint64) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, fmt.Errorf("process %d: %w", pid, ErrMoved)
		}
		return -1, fmt.Errorf("open process %d: %w", pid, err)
	}
	got, ok, err := p.ContainerID(pid)
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		err = fmt.Errorf("process %d: %w", pid, ErrMoved)
	case err == nil && (!ok || got != id):
		err = fmt.Errorf("process %d: %w", pid, ErrMoved)
	case err == nil && start != 0:
		if got, live := p.Start(pid); !live || got != start {
			err = fmt.Errorf("process %d is not the one that held the memory: %w", pid, ErrMoved)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// First reports whether pid is the first process of its PID namespace
// (the container's own, when the pod does not share one): killing it
// ends the container, which then restarts under its restart policy.
func (p Procfs) First(pid int) bool {
	raw, err := os.ReadFile(path.Join(p.Root, strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) > 0 && f[len(f)-1] == "1"
		}
	}
	return false
}

// Start reads when pid started (field 22 of /proc/<pid>/stat, clock
// ticks since boot); live is false for a process that ended or is a
// zombie.
func (p Procfs) Start(pid int) (start uint64, live bool) {
	raw, err := os.ReadFile(path.Join(p.Root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// The command, field 2, is in parentheses and may hold anything.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}
