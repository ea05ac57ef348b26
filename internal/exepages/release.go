// Package exepages hands back to the kernel the pages of the process's own
// binary that start-up mapped.
//
// Package initialisation runs a little code in each of the several hundred
// packages the binary links, spread over its whole text, and looks up type
// and function tables as it goes. The kernel answers each of those faults
// by mapping the 64 KiB of the file around it and reading more ahead: a
// node replica held 46 MiB resident, 38 of them its binary, where its
// steady work touches a few MiB of code. Once start-up is over, Release
// lets the kernel take those pages back; what runs afterwards faults in
// only what it uses.
package exepages

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one mapping of the binary, [Start, End).
type Mapping struct{ Start, End uintptr }

// Stats is the process's resident memory around a Release, in bytes.
type Stats struct{ Before, After int64 }

// Release advises the kernel that the binary's read-only mappings (code,
// read-only data, function tables) are read at random, so that a later
// fault reads the page it needs rather than a window around it, and pages
// them out: they are unmapped and, where no other process maps them,
// dropped from the page cache (and from the memory cgroup's charge).
// Nothing is lost: a page is read back from the binary when next used
// (the one page of relocated read-only data, the process's own copy, is
// swapped out or kept). The advice to read at random holds for the rest
// of the process: code first run after the release reads a page per
// fault, where it would have read ahead. MADV_PAGEOUT needs Linux 5.4; on
// a file the caller neither owns nor may write, the kernel skips its
// pages. After an error, the mappings before the one named are released.
func Release() (Stats, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Stats{}, fmt.Errorf("find the binary: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return Stats{}, fmt.Errorf("read the mappings: %w", err)
	}
	mappings, err := ReadOnlyMappings(f, exe)
	f.Close()
	if err != nil {
		return Stats{}, err
	}
	if len(mappings) == 0 {
		return Stats{}, fmt.Errorf("no read-only mapping of %s in /proc/self/maps", exe)
	}
	st := Stats{Before: resident()}
	for i, m := range mappings {
		for _, advice := range []struct {
			name string
			n    int
		}{{"MADV_RANDOM", unix.MADV_RANDOM}, {"MADV_PAGEOUT", unix.MADV_PAGEOUT}} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, uintptr(advice.n)); errno != 0 {
				st.After = resident()
				return st, fmt.Errorf("madvise(%s) on %s [%#x, %#x), mapping %d of %d: %w", advice.name, exe, m.Start, m.End, i+1, len(mappings), errno)
			}
		}
	}
	st.After = resident()
	return st, nil
}

// ReadOnlyMappings lists exe's mappings that are not writable, from maps in
// the format of /proc/<pid>/maps. The writable one holds the binary's
// variables: those pages are the process's own.
func ReadOnlyMappings(maps io.Reader, exe string) ([]Mapping, error) {
	var mappings []Mapping
	s := bufio.NewScanner(maps)
	for s.Scan() {
		// address perms offset dev inode path; the path may hold spaces.
		fields := strings.SplitN(s.Text(), " ", 6)
		if len(fields) < 6 || strings.TrimLeft(fields[5], " ") != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("read the mappings: bad address range %q", fields[0])
		}
		mappings = append(mappings, Mapping{uintptr(start), uintptr(end)})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read the mappings: %w", err)
	}
	return mappings, nil
}

// resident is the process's resident memory in bytes, or -1.
func resident() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}
