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
// from /proc, stops each (SIGSTOP: a stopped process forks no more),
// then kills each, the first of its PID namespace among them, so that
// the kernel ends the rest of a container's own namespace; where the pod
// shares one namespace, each process whose cgroup names the container is
// killed, round after round, until none is left. Each signal holds the
// process by a pidfd and checks its cgroup first (signal). It returns
// how many processes were killed; the container's processes are listed
// from /proc only here, when one is to be ended.
func (p Procfs) EndContainer(id string) (int, error) {
	ended := 0
	var errs []error
	for range endRounds {
		pids, err := p.members(id)
		if err != nil {
			return ended, err
		}
		if len(pids) == 0 {
			return ended, nil
		}
		errs = errs[:0]
		for _, pid := range pids {
			_ = p.signal(pid, id, 0, unix.SIGSTOP)
		}
		for _, pid := range pids {
			switch err := p.signal(pid, id, 0, unix.SIGKILL); {
			case err == nil:
				ended++
			case !errors.Is(err, ErrMoved):
				errs = append(errs, err)
			}
		}
	}
	if pids, _ := p.members(id); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("container %s: %d processes still run after %d rounds of kills", id, len(pids), endRounds))
	}
	return ended, errors.Join(errs...)
}

// members lists the live processes whose cgroup names container id.
func (p Procfs) members(id string) ([]int, error) {
	ents, err := os.ReadDir(p.Root)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
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
			if _, live := p.Start(pid); live {
				pids = append(pids, pid)
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
