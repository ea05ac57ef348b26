package nodesetup

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/node/internal/preflight"
)

// Restart modes: how the one-shot restarts the runtime once its files
// changed.
const (
	// RestartNone changes files only and reports the restart as needed.
	RestartNone = "none"
	// RestartSignal sends SIGTERM to the process serving the runtime's
	// socket and waits for another to serve it: for a runtime whose
	// supervisor starts it again after it exits, as containerd's systemd
	// unit does (Restart=always). Its containers run on in their shims.
	RestartSignal = "signal"
)

// servingPID is the process that accepts connections on the unix socket
// at path, as the kernel names it to the caller (SO_PEERCRED): 0 where
// that process is outside the caller's PID namespace.
func servingPID(ctx context.Context, path string) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("SO_PEERCRED on %s: %w", path, serr)
	}
	return int(cred.Pid), nil
}

// servingRuntime is the PID of the process serving socket, which must
// run one of binaries (its /proc/PID/exe's name): nothing else is ever
// signalled.
func servingRuntime(ctx context.Context, socket string, binaries []string) (int, error) {
	pid, err := servingPID(ctx, socket)
	if err != nil {
		return 0, fmt.Errorf("find the runtime by its socket %s: %w", socket, err)
	}
	if pid <= 1 {
		return 0, fmt.Errorf("the process serving %s is not visible from here (PID %d): the pod needs hostPID", socket, pid)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, fmt.Errorf("what PID %d serving %s runs: %w (the container needs to be privileged)", pid, socket, err)
	}
	name := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	if !slices.Contains(binaries, name) {
		return 0, fmt.Errorf("%s is served by PID %d, which runs %s, not %s: set the runtime's socket (runtime.socket)", socket, pid, exe, strings.Join(binaries, " or "))
	}
	// The signal goes through a pidfd (Linux 5.3+): known before any
	// file changes.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("open the runtime's process (PID %d) as a pidfd, which needs Linux 5.3 or newer: %w", pid, err)
	}
	unix.Close(fd)
	return pid, nil
}

// signalRestart stops the runtime serving socket (running one of
// binaries) with SIGTERM, through a pidfd taken while that very process
// serves it, so that a reused PID is never hit; then it waits until
// another process serves the socket. It returns the old and new PIDs,
// and whether the signal went.
func signalRestart(ctx context.Context, socket string, binaries []string) (old, now int, sent bool, err error) {
	old, err = servingRuntime(ctx, socket, binaries)
	if err != nil {
		return 0, 0, false, err
	}
	fd, err := unix.PidfdOpen(old, 0)
	if err != nil {
		return old, 0, false, fmt.Errorf("open the runtime's process (PID %d): %w", old, err)
	}
	defer unix.Close(fd)
	if again, err := servingPID(ctx, socket); err != nil || again != old {
		return old, 0, false, fmt.Errorf("the runtime serving %s changed while it was being stopped (PID %d, now %d, %v): try again", socket, old, again, err)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		return old, 0, false, fmt.Errorf("signal the runtime (PID %d): %w", old, err)
	}
	err = poll(ctx, func() error {
		pid, err := servingPID(ctx, socket)
		switch {
		case err != nil:
			return err
		case pid == old || pid <= 1:
			return fmt.Errorf("PID %d still serves it", pid)
		}
		now = pid
		return nil
	})
	if err != nil {
		return old, 0, true, fmt.Errorf("no new runtime served %s after PID %d was stopped: is it run by a supervisor that starts it again, as systemd's Restart=always? %w", socket, old, err)
	}
	return old, now, true, nil
}

// daemon is the runtime's process and systemd unit name.
func daemon(runtime string) string {
	return map[string]string{preflight.RuntimeContainerd: "containerd", preflight.RuntimeCRIO: "crio"}[runtime]
}
