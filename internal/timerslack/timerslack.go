// Package timerslack widens the kernel's timer slack for every thread of
// the process, from before Go's runtime starts its first one.
//
// Go's sysmon thread wakes from its deep sleep at the first system call
// after the process was idle, and then sleeps 20 µs at a time, each a
// nanosleep and two context switches, until the process idles again. A
// replica idles several times a pod (a /filter, a /bind, the API's answer,
// the watch event), and where a context switch traps to a hypervisor that
// polling was a large part of the leader's CPU (docs/settings-runtime.md).
// With a slack of 1 ms the kernel may let each of those sleeps run to
// 1 ms. What that delays is the runtime's own short waits: sysmon's
// hand-off of the one P from a long cgo call (NVML), within about 2 ms
// instead of a tenth of that; vgpud's own timers are 50 ms and longer.
//
// A thread inherits its creator's slack, so it is set in a C constructor,
// which runs before Go's runtime makes sysmon; setting it later reaches
// only the calling thread (another thread's needs CAP_SYS_NICE, which
// vgpud's pods do not hold). VGPUD_TIMER_SLACK_NS, read there, is the one
// way to change it: nanoseconds, 0 to keep the slack vgpud started with.
package timerslack

/*
#include <stdlib.h>
#include <sys/prctl.h>

#define VGPUD_TIMER_SLACK_DEFAULT_NS 1000000UL
#define VGPUD_TIMER_SLACK_MAX_NS 1000000000UL

// The same rule as Parse: unset or empty is the default, else only
// digits, at most a second; 0, or anything Parse refuses, keeps the slack
// the process started with (Check then refuses the replica's start).
__attribute__((constructor)) static void vgpud_timer_slack(void) {
	const char *v = getenv("VGPUD_TIMER_SLACK_NS");
	unsigned long ns = VGPUD_TIMER_SLACK_DEFAULT_NS;
	if (v != NULL && v[0] != '\0') {
		ns = 0;
		for (const char *p = v; *p != '\0'; p++) {
			if (*p < '0' || *p > '9') {
				return;
			}
			unsigned long d = (unsigned long)(*p - '0');
			if (ns > (VGPUD_TIMER_SLACK_MAX_NS - d) / 10) {
				return;
			}
			ns = ns * 10 + d;
		}
		if (ns == 0) {
			return;
		}
	}
	prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0);
}
*/
import "C"

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// EnvVar is the variable the constructor reads (the constructor test
// fails if the two names differ).
const EnvVar = "VGPUD_TIMER_SLACK_NS"

// Default is the slack when EnvVar is unset or empty.
const Default = C.VGPUD_TIMER_SLACK_DEFAULT_NS * time.Nanosecond

// maxSlack bounds EnvVar: a second of lateness on every timer is past
// any use.
const maxSlack = C.VGPUD_TIMER_SLACK_MAX_NS * time.Nanosecond

// Parse is what the constructor made of v: the slack it set and true, or
// false where it kept the one the process started with (v is "0"), or
// an error saying what to write instead.
func Parse(v string) (time.Duration, bool, error) {
	if v == "" {
		return Default, true, nil
	}
	var ns int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false, fmt.Errorf("%s=%q: want nanoseconds as digits alone, 0 to keep the slack vgpud started with (the kernel's is 50000), unset for %d", EnvVar, v, Default.Nanoseconds())
		}
		ns = ns*10 + int64(c-'0')
		if ns > maxSlack.Nanoseconds() {
			return 0, false, fmt.Errorf("%s=%q: at most %d nanoseconds (a second)", EnvVar, v, maxSlack.Nanoseconds())
		}
	}
	return time.Duration(ns), ns != 0, nil
}

// Check refuses an EnvVar that the constructor ignored, so a typo does
// not pass for the slack vgpud started with. lookup reads the
// environment.
func Check(lookup func(string) (string, bool)) error {
	v, _ := lookup(EnvVar)
	_, _, err := Parse(v)
	return err
}

// Current is the calling thread's timer slack, as the kernel keeps it.
func Current() (time.Duration, error) {
	ns, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the timer slack: %w", err)
	}
	return time.Duration(ns), nil
}

// Mismatch says why got, a thread's slack as Current read it, is not
// what EnvVar (read by lookup) asked the constructor for, or "" when it
// is or when EnvVar asked for none. A real-time thread, for one, has no
// slack.
func Mismatch(lookup func(string) (string, bool), got time.Duration) string {
	v, _ := lookup(EnvVar)
	want, set, err := Parse(v)
	if err != nil || !set || got == want {
		return ""
	}
	return fmt.Sprintf("the timer slack is %v, not the %v %s asks for", got, want, EnvVar)
}
