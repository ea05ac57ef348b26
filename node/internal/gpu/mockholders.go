package gpu

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// What keeps a declared process's memory listed, as the driver keeps
// it: the PID that opened the GPU is listed for as long as any process
// holds its file descriptor. The mock cannot see descriptors, so it
// takes every process that could hold one: the opener, each process of
// its container, and their descendants, each by PID and start time (a
// zombie still holds). A declared process's memory is freed only when
// all are gone.

// holders is what may hold one declared process's descriptor.
type holders struct {
	opener    proc
	container string // the opener's container ID from its cgroup; "" for none
	known     map[proc]bool
}

// proc is a process by PID and start time: a PID reused is another.
type proc struct {
	pid   int
	start uint64
}

// procInfo is what the mock reads of a process in /proc.
type procInfo struct {
	start     uint64
	ppid      int
	container string
}

// containerInCgroup is a pod container's ID in a cgroup file: the first
// 64-hex element below kubepods. A process in no pod's cgroup (a test
// runner's, even inside a container of its own) is in no container.
var containerInCgroup = regexp.MustCompile(`kubepods[^\n]*?/(?:[a-z-]*-)?([0-9a-f]{64})(?:\.scope)?(?:/|\n|$)`)

// readProc reads pid's start time, parent and container from /proc; ok
// is false once its PID is free (a zombie is still there).
func readProc(pid int) (procInfo, bool) {
	p, ok := readStat(pid)
	if ok {
		if cg, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup")); err == nil {
			if m := containerInCgroup.FindSubmatch(cg); m != nil {
				p.container = string(m[1])
			}
		}
	}
	return p, ok
}

// readStat reads pid's start time and parent, not its container.
func readStat(pid int) (procInfo, bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 20 {
		return procInfo{}, false
	}
	var p procInfo
	p.ppid, _ = strconv.Atoi(f[1])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

// newHolders notes who may hold pid's descriptor from now on.
func newHolders(pid int) *holders {
	info, ok := readProc(pid)
	h := &holders{opener: proc{pid, info.start}, known: map[proc]bool{}}
	if ok {
		h.container = info.container
		h.known[h.opener] = true
	}
	return h
}

// alive reports whether some process that may hold the descriptor is
// still there, learning the holders' children as it looks, and the
// container's processes. It reads all of /proc only once the opener is
// gone.
func (h *holders) alive() bool {
	if info, ok := readStat(h.opener.pid); ok && info.start == h.opener.start {
		h.learnChildren()
		return true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: keep it, as a driver would
	}
	all := map[int]procInfo{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, ok := readProc(pid); ok {
			all[pid] = info
		}
	}
	live := map[int]bool{} // PIDs of holders still there
	for p := range h.known {
		if info, ok := all[p.pid]; ok && info.start == p.start {
			live[p.pid] = true
		} else {
			delete(h.known, p)
		}
	}
	// The container's processes, and children of holders, until no more.
	for grew := true; grew; {
		grew = false
		for pid, info := range all {
			if live[pid] {
				continue
			}
			if (h.container != "" && info.container == h.container) || live[info.ppid] {
				h.known[proc{pid, info.start}] = true
				live[pid] = true
				grew = true
			}
		}
	}
	return len(h.known) > 0
}

// learnChildren adds the children of every known holder still there
// (its main thread's, from /proc), so that a child forked and moved
// elsewhere while its parent lived is still known once the parent ends.
func (h *holders) learnChildren() {
	for p := range h.known {
		raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "task", strconv.Itoa(p.pid), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(raw)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if info, ok := readStat(pid); ok {
				h.known[proc{pid, info.start}] = true
			}
		}
	}
}
