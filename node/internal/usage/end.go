package usage

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// endRounds bounds how often EndContainer looks again for processes
// left: one that forks faster than it is stopped is reported, not chased
// for ever (the caller tries again later).
const endRounds = 32

// EndContainer ends every process of container id with SIGKILL, with
// the kill capability alone. Each round lists the container's processes
// from /proc and holds each by a pidfd, its cgroup checked (hold); it
// stops each (SIGSTOP: a stopped process forks no more), then kills each
// through the same pidfd, the first of a PID namespace among them, so
// that the kernel ends the rest of a container's own namespace; where
// the pod shares one namespace, round after round, until none is left.
// A process killed once is dying (a CUDA process may take a while to
// release the GPU): it is counted once and not taken for one still
// running. It returns how many processes were killed; the container's
// processes are listed from /proc only here, when one is to be ended.
func (p Procfs) EndContainer(id string) (int, error) {
	killed := map[proc]bool{}
	var errs []error
	for range endRounds {
		pids, err := p.members(id)
		if err != nil {
			return len(killed), err
		}
		var fds []int
		var held []proc
		for _, pr := range pids {
			if killed[pr] {
				continue
			}
			fd, err := p.hold(pr.pid, id, 0)
			if err != nil {
				if !errors.Is(err, ErrMoved) {
					errs = append(errs, err)
				}
				continue
			}
			_ = unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0)
			fds, held = append(fds, fd), append(held, pr)
		}
		if len(fds) == 0 {
			return len(killed), errors.Join(errs...)
		}
		for i, fd := range fds {
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err == nil || errors.Is(err, unix.ESRCH) {
				killed[held[i]] = true
			} else {
				errs = append(errs, fmt.Errorf("kill process %d: %w", held[i].pid, err))
				_ = unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0) // never left stopped
			}
			unix.Close(fd)
		}
	}
	left := 0
	pids, _ := p.members(id)
	for _, pr := range pids {
		if !killed[pr] {
			left++
		}
	}
	if left > 0 {
		errs = append(errs, fmt.Errorf("container %s: %d processes still run after %d rounds of kills", id, left, endRounds))
	}
	return len(killed), errors.Join(errs...)
}

// proc is a process by PID and start time: a PID reused is another.
type proc struct {
	pid   int
	start uint64
}

// members lists the live processes whose cgroup names container id.
func (p Procfs) members(id string) ([]proc, error) {
	ents, err := os.ReadDir(p.Root)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		raw, err := os.ReadFile(path.Join(p.Root, e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(raw), id) {
			continue // gone meanwhile, or not its
		}
		if got, ok := containerIDFromCgroup(raw); ok && got == id {
			if start, live := p.Start(pid); live {
				pids = append(pids, proc{pid, start})
			}
		}
	}
	return pids, nil
}

// BootID names this boot of the host: PIDs and start times of another
// mean nothing now. "" where it cannot be read.
func (p Procfs) BootID() string {
	raw, err := os.ReadFile(path.Join(p.Root, "sys/kernel/random/boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}
