package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// keptProcess is a declared process as KeepProcesses writes it down:
// what it holds and who may still hold its descriptor.
type keptProcess struct {
	Sample    ProcessSample `json:"sample"`
	Opener    [2]uint64     `json:"opener"` // PID, start
	Container string        `json:"container,omitempty"`
	Known     [][2]uint64   `json:"known"`
}

// KeepProcesses has the mock's declared processes outlive its process,
// as a driver's process list outlives vgpud's: it declares again what
// path lists (with the holders an earlier process learnt), and writes
// path at each declaration and each process freed from now on.
func (m *Mock) KeepProcesses(path string) error {
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the mock's processes %s: %w", path, err)
	default:
		var kept []keptProcess
		if err := json.Unmarshal(raw, &kept); err != nil {
			return fmt.Errorf("read the mock's processes %s: %w", path, err)
		}
		m.mu.Lock()
		for _, k := range kept {
			h := &holders{opener: proc{int(k.Opener[0]), k.Opener[1]}, container: k.Container, known: map[proc]bool{}}
			for _, p := range k.Known {
				h.known[proc{int(p[0]), p[1]}] = true
			}
			m.declare(k.Sample, h)
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.keepAt = path
	m.mu.Unlock()
	return nil
}

// keep writes the declared processes where KeepProcesses said; m.mu
// held.
func (m *Mock) keep() {
	if m.keepAt == "" {
		return
	}
	kept := []keptProcess{}
	for gpu, procs := range m.procs {
		for pid, s := range procs {
			h := m.holding[gpu][pid]
			if h == nil {
				continue
			}
			k := keptProcess{Sample: s, Opener: [2]uint64{uint64(h.opener.pid), h.opener.start}, Container: h.container, Known: [][2]uint64{}}
			for p := range h.known {
				k.Known = append(k.Known, [2]uint64{uint64(p.pid), p.start})
			}
			kept = append(kept, k)
		}
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(m.keepAt), filepath.Base(m.keepAt)+".*")
	if err != nil {
		return
	}
	_, err = tmp.Write(raw)
	if cerr := tmp.Close(); err == nil && cerr == nil {
		err = os.Rename(tmp.Name(), m.keepAt)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
}
