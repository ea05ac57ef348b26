package node

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// asDaemonSet leaves the calling goroutine's OS thread what the
// DaemonSet gives the node role: CAP_KILL alone, in every set and the
// bounding set, and no new privileges. Linux keeps these per thread, and
// the enforcer samples, kills and ends on the goroutine that calls its
// Run, so a proof that runs Run here acts with the node role's
// privileges, not the test's. The thread is never unlocked: it ends with
// the goroutine. It returns the thread's sets as /proc shows them.
func asDaemonSet() (string, error) {
	runtime.LockOSThread()
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if c == unix.CAP_KILL {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return "", fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("no new privileges: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: 1 << unix.CAP_KILL, Permitted: 1 << unix.CAP_KILL}}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return "", fmt.Errorf("capset to CAP_KILL alone: %w", err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", unix.Gettid()))
	if err != nil {
		return "", err
	}
	var sets []string
	for _, line := range strings.Split(string(raw), "\n") {
		for _, key := range []string{"CapEff:", "CapPrm:", "CapBnd:", "NoNewPrivs:"} {
			if strings.HasPrefix(line, key) {
				sets = append(sets, strings.Join(strings.Fields(line), " "))
			}
		}
	}
	if want := fmt.Sprintf("CapEff: %016x", 1<<unix.CAP_KILL); !strings.Contains(strings.Join(sets, ","), want) {
		return "", fmt.Errorf("the thread's sets are %v; want %s", sets, want)
	}
	return strings.Join(sets, ", "), nil
}
