package harness

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Kernel is what a process has cost the kernel so far: its CPU split
// into user and system time, its minor page faults and its threads'
// context switches. On a guest where a syscall or a fault traps to the
// host (a PVM guest costs some 3 µs a syscall), the same code's CPU per
// request moves with these counts, not with its own instructions.
type Kernel struct {
	User, System time.Duration // in 10 ms ticks: read them over seconds
	MinorFaults  int64
	Switches     int64 // voluntary and involuntary, over every thread
}

// Sub is k less an earlier reading.
func (k Kernel) Sub(o Kernel) Kernel {
	return Kernel{User: k.User - o.User, System: k.System - o.System, MinorFaults: k.MinorFaults - o.MinorFaults, Switches: k.Switches - o.Switches}
}

// ReadKernel reads pid's Kernel from /proc.
func ReadKernel(pid int) (Kernel, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Kernel{}, err
	}
	// After the command, which is in parentheses and may hold spaces:
	// minflt is the 8th field, utime and stime the 12th and 13th, the
	// process's threads summed.
	_, rest, _ := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return Kernel{}, fmt.Errorf("/proc/%d/stat: %d fields after the command, want 13 or more", pid, len(f))
	}
	var k Kernel
	var ticks [3]int64
	for i, field := range []int{7, 11, 12} {
		if ticks[i], err = strconv.ParseInt(f[field], 10, 64); err != nil {
			return Kernel{}, fmt.Errorf("/proc/%d/stat field %d: %w", pid, field+3, err)
		}
	}
	k.MinorFaults = ticks[0]
	k.User, k.System = time.Duration(ticks[1])*10*time.Millisecond, time.Duration(ticks[2])*10*time.Millisecond
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return Kernel{}, err
	}
	for _, task := range tasks {
		n, err := taskSwitches(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // the thread ended meanwhile
		}
		k.Switches += n
	}
	return k, nil
}

// taskSwitches is a thread's voluntary and involuntary context switches.
func taskSwitches(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, v, ok := strings.Cut(s.Text(), ":")
		if !ok || (name != "voluntary_ctxt_switches" && name != "nonvoluntary_ctxt_switches") {
			continue
		}
		c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		n += c
	}
	return n, s.Err()
}
