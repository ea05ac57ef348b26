package harness

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cached is the fraction of path's pages in the page cache.
func Cached(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("map %s: %w", path, err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	// x/sys has no wrapper for mincore(2).
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return float64(in) / float64(len(vec)), nil
}

// Evict drops path's clean pages from the page cache, so the next program
// to run it reads it from disk as after a reboot; pages a running process
// maps stay. It returns the fraction still cached.
func Evict(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil { // dirty pages are not dropped
		f.Close()
		return 0, fmt.Errorf("sync %s: %w", path, err)
	}
	err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("evict %s: %w", path, err)
	}
	return Cached(path)
}
