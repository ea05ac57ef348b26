package nodesetup

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// signalRestart stops the runtime serving socket with SIGTERM and waits
// until another process serves it, polling every poll; it returns the
// old and new PIDs.
func signalRestart(ctx context.Context, socket string, poll time.Duration) (old, now int, err error) {
	old, err = servingPID(ctx, socket)
	if err != nil {
		return 0, 0, fmt.Errorf("find the runtime by its socket %s: %w", socket, err)
	}
	if old <= 1 {
		return 0, 0, fmt.Errorf("the process serving %s is not visible from here (PID %d): the pod needs hostPID", socket, old)
	}
	if err := unix.Kill(old, syscall.SIGTERM); err != nil {
		return old, 0, fmt.Errorf("signal the runtime (PID %d): %w", old, err)
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	var last error
	for {
		now, err := servingPID(ctx, socket)
		switch {
		case err == nil && now != old && now > 1:
			return old, now, nil
		case err == nil:
			last = fmt.Errorf("PID %d still serves it", now)
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			return old, 0, fmt.Errorf("no new runtime served %s after PID %d was stopped (%w): is it run by a supervisor that starts it again, as systemd's Restart=always? last: %v", socket, old, context.Cause(ctx), last)
		case <-t.C:
		}
	}
}
