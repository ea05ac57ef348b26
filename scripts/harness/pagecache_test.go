package harness

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEvict(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is on tmpfs (or unknown: %v), whose pages cannot be evicted", dir, err)
	}
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := Cached(path); err != nil || c < 0.99 {
		t.Fatalf("a file just written: %.2f cached, %v", c, err)
	}
	if c, err := Evict(path); err != nil || c > 0.01 {
		t.Fatalf("after Evict: %.2f cached, %v", c, err)
	}
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if c, err := Cached(path); err != nil || c < 0.99 {
		t.Fatalf("read back: %.2f cached, %v", c, err)
	}
}
