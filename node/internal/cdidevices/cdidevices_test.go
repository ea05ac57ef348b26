package cdidevices

//vgpud:wallclock the CDI library follows spec files with fsnotify, on its own goroutine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/node/internal/preflight"
)

// spec is what nvidia-ctk cdi generate writes, in short: a device per GPU
// by index, one by UUID, "all", and the control nodes for every device.
const spec = `cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes: [{path: /dev/nvidia0}]
  - name: GPU-bbbb
    containerEdits:
      deviceNodes: [{path: /dev/nvidia1}]
  - name: all
    containerEdits:
      deviceNodes: [{path: /dev/nvidia0}, {path: /dev/nvidia1}]
  - name: GPU-cccc
    containerEdits:
      deviceNodes: [{path: /dev/nvidia2}, {path: /dev/nvidia0}]
containerEdits:
  deviceNodes: [{path: /dev/nvidiactl}, {path: /dev/nvidia-uvm}]
`

func resolver(t *testing.T, mode string, cdi preflight.CDI) *Resolver {
	t.Helper()
	r := &Resolver{Mode: mode,
		Runtime: func() (preflight.CDI, bool) { return cdi, true },
		Index: func(uuid string) (int, bool) {
			i := slices.Index([]string{"GPU-aaaa", "GPU-bbbb", "GPU-cccc"}, uuid)
			return i, i >= 0
		}}
	t.Cleanup(r.Close)
	return r
}

func TestDevicesNameEachGPUAsTheSpecDoes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	on := preflight.CDI{Enabled: true, SpecDirs: []string{dir}}
	names, nodes, err := resolver(t, ModeAuto, on).Devices([]string{"GPU-aaaa", "GPU-bbbb"})
	if err != nil || !slices.Equal(names, []string{"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-bbbb"}) ||
		!slices.Equal(nodes, []string{"/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}) {
		t.Errorf("Devices = %v, %v, %v", names, nodes, err)
	}
	// GPU-cccc's device brings another GPU's node too: it names none.
	// A GPU the spec does not name: env alone in auto, refused when on.
	if names, _, err := resolver(t, ModeAuto, on).Devices([]string{"GPU-cccc"}); err != nil || names != nil {
		t.Errorf("auto, unnamed GPU: %v, %v", names, err)
	}
	if _, _, err := resolver(t, ModeOn, on).Devices([]string{"GPU-cccc"}); err == nil || !strings.Contains(err.Error(), "names GPU GPU-cccc") {
		t.Errorf("on, unnamed GPU: %v", err)
	}
	// The runtime injects none: nothing in auto, refused when on; off
	// never asks.
	for _, tc := range []struct {
		mode string
		cdi  preflight.CDI
		err  string
	}{{ModeAuto, preflight.CDI{}, ""}, {ModeOn, preflight.CDI{}, "injects no CDI devices"}, {ModeOff, on, ""}} {
		names, _, err := resolver(t, tc.mode, tc.cdi).Devices([]string{"GPU-aaaa"})
		if names != nil || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s with %+v: %v, %v; want none, %q", tc.mode, tc.cdi, names, err, tc.err)
		}
	}
	// Before the runtime's configuration is read, nothing is guessed.
	unread := &Resolver{Mode: ModeAuto, Runtime: func() (preflight.CDI, bool) { return preflight.CDI{}, false }, Index: func(string) (int, bool) { return 0, false }}
	if _, _, err := unread.Devices([]string{"GPU-aaaa"}); err == nil || !strings.Contains(err.Error(), "not been read yet") {
		t.Errorf("before a reading: %v", err)
	}
	// A spec written later is read.
	dir2 := t.TempDir()
	r := resolver(t, ModeOn, preflight.CDI{Enabled: true, SpecDirs: []string{dir2}})
	if _, _, err := r.Devices([]string{"GPU-bbbb"}); err == nil {
		t.Fatal("named a GPU from an empty directory")
	}
	// Written whole (renamed in), as nvidia-ctk does.
	tmp := filepath.Join(t.TempDir(), "nvidia.yaml")
	if err := os.WriteFile(tmp, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir2, "nvidia.yaml")); err != nil {
		t.Fatal(err)
	}
	// The library's watcher rescans on its own goroutine.
	deadline := time.Now().Add(5 * time.Second)
	for {
		names, _, err := r.Devices([]string{"GPU-bbbb"})
		if err == nil && len(names) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the spec was written: %v, %v", names, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMountedReadsRunAsVarRun(t *testing.T) {
	if got := mounted([]string{"/etc/cdi", "/run/cdi", "/var/run/cdi"}); !slices.Equal(got, []string{"/etc/cdi", "/var/run/cdi", "/var/run/cdi"}) {
		t.Errorf("mounted = %v", got)
	}
}

// A DRA claim's device takes the spec's edits for its GPU, common ones
// first, without env; whatever --cdi says, a GPU the spec does not name
// and a runtime that injects no CDI devices are errors saying so.
func TestEditsForADRAClaim(t *testing.T) {
	dir := t.TempDir()
	withEnv := strings.Replace(spec, "containerEdits:\n  deviceNodes", "containerEdits:\n  env: [NVIDIA_VISIBLE_DEVICES=void]\n  deviceNodes", 1)
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte(withEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	on := preflight.CDI{Enabled: true, SpecDirs: []string{dir}}
	e, err := resolver(t, ModeOff, on).Edits("GPU-bbbb")
	var nodes []string
	for _, n := range e.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	if err != nil || len(e.Env) != 0 || !slices.Equal(nodes, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"}) {
		t.Errorf("Edits(GPU-bbbb) = %+v %v, %v", e, nodes, err)
	}
	if _, err := resolver(t, ModeAuto, on).Edits("GPU-cccc"); err == nil || !strings.Contains(err.Error(), "nvidia-ctk cdi generate") {
		t.Errorf("a GPU whose device brings another's: %v", err)
	}
	if _, err := resolver(t, ModeAuto, preflight.CDI{}).Edits("GPU-bbbb"); err == nil || !strings.Contains(err.Error(), "enable_cdi") {
		t.Errorf("no CDI in the runtime: %v", err)
	}
}
