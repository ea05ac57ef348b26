package grant

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
)

// On the guessing path the cache is a host directory: open to the
// container's users, in a parent no container can list, and swept once
// its pod is gone and it has sat unchanged a while.
func TestCacheDirsAreSweptWithTheirPods(t *testing.T) {
	dir := t.TempDir()
	c := protocol.ContainerAssignment{Name: "app", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 1000}}}
	gone, live := For(c, "uid-gone", nil, Shape{Interposer: dir}), For(c, "uid-live", nil, Shape{Interposer: dir})
	for _, s := range []Slice{gone, live} {
		if err := MakeCacheDir(s); err != nil {
			t.Fatal(err)
		}
	}
	parent, err := os.Stat(filepath.Dir(gone.CacheDir))
	if err != nil || parent.Mode().Perm() != 0o711 {
		t.Fatalf("parent %v %v, want mode 0711", parent.Mode(), err)
	}
	if st, err := os.Stat(gone.CacheDir); err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("cache dir %v %v", st.Mode(), err)
	}
	isLive := func(uid types.UID) bool { return uid == "uid-live" }
	now := time.Now()
	if removed, err := SweepCaches(dir, isLive, time.Minute, now); err != nil || len(removed) != 0 {
		t.Fatalf("swept %v (%v) within the grace", removed, err)
	}
	removed, err := SweepCaches(dir, isLive, time.Minute, now.Add(2*time.Minute))
	if err != nil || len(removed) != 1 || removed[0] != "uid-gone_app" {
		t.Fatalf("swept %v (%v), want uid-gone_app", removed, err)
	}
	if _, err := os.Stat(live.CacheDir); err != nil {
		t.Fatalf("live pod's cache swept: %v", err)
	}
}
