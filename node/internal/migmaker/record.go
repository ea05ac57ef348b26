package migmaker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

// Entry is one instance vgpud means to make or has made. It is written
// before the make (Made nil: intended), so that a crash between the make
// and the record leaves something to look for.
type Entry struct {
	ID      string    `json:"id"` // protocol.OnDemandID
	Parent  string    `json:"parent"`
	Profile int       `json:"profile"` // NVML's GPU instance profile ID
	Start   int       `json:"start"`
	Size    int       `json:"size"`
	Made    *gpu.Made `json:"made,omitempty"`
	Pod     string    `json:"pod"` // namespace/name/uid it was made for
	// Destroying is written before a destroy begins: a GPU instance of
	// Made's ID left without its compute instance is then the node's to
	// finish, not an operator's made since.
	Destroying bool `json:"destroying,omitempty"`
}

type record struct {
	Version   int     `json:"version"`
	Instances []Entry `json:"instances"`
}

const recordVersion = 1

// Load reads the record at path; none there is an empty one.
func Load(path string) ([]Entry, error) { return load(path) }

// load reads the record at path; none there is an empty one.
func load(path string) ([]Entry, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read MIG record: %w", err)
	}
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("MIG record %s: %w; it lists the instances vgpud made, which vgpud will not touch without it: fix or remove it", path, err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("MIG record %s: version %d, want %d", path, r.Version, recordVersion)
	}
	return r.Instances, nil
}

// save writes entries to path whole or not at all: a temporary file,
// synced, renamed over it.
func save(path string, entries []Entry) error {
	raw, err := json.Marshal(record{Version: recordVersion, Instances: entries})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("MIG record: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mig-record-*")
	if err != nil {
		return fmt.Errorf("MIG record: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return fmt.Errorf("MIG record: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("MIG record: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("MIG record: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("MIG record: %w", err)
	}
	return nil
}
