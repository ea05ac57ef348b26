package grant

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// CacheSize bounds the tmpfs the runtime hook mounts at Slice.Cache:
// HAMi-core's shared region for a container's processes is a few MiB,
// and the pages count against the container's own memory limit.
const CacheSize = "32m"

// MakeCacheDir creates a container's host cache directory on the
// guessing path. The container's processes may run as any user, so the
// directory itself is open to all; the directory of all of them is not
// listable, so no container finds another's.
func MakeCacheDir(s Slice) error {
	if s.CacheDir == "" {
		return nil
	}
	parent := filepath.Dir(s.CacheDir)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return fmt.Errorf("create the interposer's cache directory: %w", err)
	}
	if err := os.Chmod(parent, 0o711); err != nil {
		return fmt.Errorf("create the interposer's cache directory: %w", err)
	}
	if err := os.MkdirAll(s.CacheDir, 0o777); err != nil {
		return fmt.Errorf("create the interposer's cache directory: %w", err)
	}
	// MkdirAll's mode passes through the umask.
	if err := os.Chmod(s.CacheDir, 0o777); err != nil {
		return fmt.Errorf("create the interposer's cache directory: %w", err)
	}
	return nil
}

// SweepCaches removes, under interposer, the cache directories of pods
// live does not name, once unchanged for grace (a pod admitted just now
// may not be in live yet). It returns what it removed.
func SweepCaches(interposer string, live func(types.UID) bool, grace time.Duration, now time.Time) ([]string, error) {
	dir := filepath.Join(interposer, cachesDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("sweep the interposer's caches: %w", err)
	}
	var removed []string
	for _, e := range entries {
		uid, _, ok := strings.Cut(e.Name(), "_")
		if !ok || live(types.UID(uid)) {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < grace {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, fmt.Errorf("sweep the interposer's caches: %w", err)
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}

// Where the node guesses, each GPU container's interposer cache is a
// host directory (grant.Slice.CacheDir). These remove a pod's once it is
// gone: every minute, and only after the node's pods are known, those
// of no live pod that have sat unchanged two minutes.
const (
	sweepEvery = time.Minute
	sweepGrace = 2 * time.Minute
)

// LivePods are the node's pods, as its informer lists them.
type LivePods interface {
	WaitForSync(ctx context.Context) bool
	List() []*corev1.Pod
}

// Sweep removes, until ctx ends, the caches under interposer of pods no
// longer live.
func Sweep(ctx context.Context, interposer string, pods LivePods, clk clock.Clock, log *slog.Logger) {
	if !pods.WaitForSync(ctx) {
		return
	}
	for {
		live := map[types.UID]bool{}
		for _, p := range pods.List() {
			if !podmodel.Terminated(p) {
				live[p.UID] = true
			}
		}
		removed, err := SweepCaches(interposer, func(uid types.UID) bool { return live[uid] }, sweepGrace, clk.Now())
		if err != nil {
			log.Warn("sweep the interposer's caches", "err", err)
		}
		if len(removed) > 0 {
			log.Info("removed the interposer caches of pods gone", "containers", removed)
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(sweepEvery):
		}
	}
}
