package usage

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Holder is who held a listed PID when the enforcer first saw it: the
// driver lists a GPU client under the PID that opened it for as long as
// any process holds its file descriptor, so the PID may since have
// ended, become a zombie, or been reused by another process.
type Holder struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start,omitempty"`
	// Container is the runtime's ID of the container it ran in; "" for
	// none (the host's, another runtime's).
	Container string `json:"container,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"podUID,omitempty"`
	Name      string `json:"name,omitempty"`
	// Dead: first seen already ended. Charged to nobody, never blamed on
	// a later process that reuses the PID, and counted as held.
	Dead bool `json:"dead,omitempty"`
	// Carried counts the samples in a row it was kept without being
	// listed, because some GPU did not answer (maxCarried bounds it).
	Carried int `json:"carried,omitempty"`
}

// maxCarried is how many samples a holder is kept while not listed, a
// GPU not answering: past it, the PID is taken as freed.
const maxCarried = 60

// End is a container the enforcer ended whole because what it held past
// its slice was listed under PIDs that had ended, and that memory is
// still listed.
type End struct {
	Container string `json:"container"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	Name      string `json:"name"`
	GPU       string `json:"gpu"`
	Stage     Stage  `json:"stage"`
	// Samples counts the samples that listed its memory since Stage began.
	Samples int `json:"samples"`
	// Failed: the last end left processes running; it is tried again.
	Failed bool `json:"failed,omitempty"`
}

// Stage is how far the enforcer went to free a container's memory.
type Stage int

const (
	// EndedContainer: its processes were ended (its PID namespace's
	// first process, or each one).
	EndedContainer Stage = iota + 1
	// EndedPod: still listed, so every container of its pod was ended:
	// the descriptor may have gone to a sibling.
	EndedPod
	// Held: still listed after that. The descriptor is held outside the
	// pod, where vgpud may not look; the memory stays charged to the
	// pod's namespace until the driver frees it.
	Held
)

func (s Stage) String() string {
	switch s {
	case EndedContainer:
		return "container ended"
	case EndedPod:
		return "pod's containers ended"
	case Held:
		return "held outside the pod"
	}
	return fmt.Sprintf("stage %d", int(s))
}

// Memory is what the enforcer knows across samples, rescan generations
// and restarts of the node role: each listed PID's first holder and the
// containers it ended. It lives in a small versioned file on the node.
type Memory struct {
	mu      sync.Mutex // one enforcer's step at a time
	path    string
	boot    string
	holders map[int]Holder
	ends    map[string]*End
	// quiet: the memory started fresh (no file, an unreadable one, or one
	// of another boot), so who held what before is unknown: end nothing
	// for one period.
	quiet bool
	saved []byte
}

// memoryVersion is the file's format; another is read as unreadable.
const memoryVersion = 1

// maxMemoryFile bounds what is read: a node lists a few thousand PIDs.
const maxMemoryFile = 8 << 20

type memoryFile struct {
	Version int      `json:"version"`
	Boot    string   `json:"boot"`
	Holders []Holder `json:"holders"`
	Ends    []End    `json:"ends,omitempty"`
}

// LoadMemory reads the memory at path ("" keeps it in memory only) for
// the boot with ID boot. A missing file, an unreadable one or one
// written in another boot starts fresh and quiet; err says why where
// the file was there but not usable.
func LoadMemory(path, boot string) (*Memory, error) {
	m := &Memory{path: path, boot: boot, holders: map[int]Holder{}, ends: map[string]*End{}, quiet: true}
	if path == "" {
		return m, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read the enforcer's memory %s: %w", path, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxMemoryFile+1))
	if err != nil {
		return m, fmt.Errorf("read the enforcer's memory %s: %w", path, err)
	}
	var mf memoryFile
	switch {
	case len(raw) > maxMemoryFile:
		return m, fmt.Errorf("the enforcer's memory %s is over %d bytes", path, maxMemoryFile)
	case json.Unmarshal(raw, &mf) != nil:
		return m, fmt.Errorf("the enforcer's memory %s is not JSON", path)
	case mf.Version != memoryVersion:
		return m, fmt.Errorf("the enforcer's memory %s is version %d, not %d", path, mf.Version, memoryVersion)
	case boot == "" || mf.Boot != boot:
		return m, nil // PIDs and start times of another (or an unknown) boot mean nothing now
	}
	for _, h := range mf.Holders {
		if h.PID > 0 {
			m.holders[h.PID] = h
		}
	}
	for _, e := range mf.Ends {
		if e.Container != "" && e.Stage >= EndedContainer && e.Stage <= Held {
			m.ends[e.Container] = &e
		}
	}
	m.quiet = false
	m.saved = raw
	return m, nil
}

// save writes the memory when it changed: to a temporary file renamed
// over the old, so a crash leaves one or the other whole.
func (m *Memory) save() error {
	if m.path == "" || m.boot == "" {
		return nil // without a boot's name, no later start could trust it
	}
	mf := memoryFile{Version: memoryVersion, Boot: m.boot, Holders: make([]Holder, 0, len(m.holders))}
	for _, h := range m.holders {
		mf.Holders = append(mf.Holders, h)
	}
	slices.SortFunc(mf.Holders, func(a, b Holder) int { return a.PID - b.PID })
	for _, e := range m.ends {
		mf.Ends = append(mf.Ends, *e)
	}
	slices.SortFunc(mf.Ends, func(a, b End) int { return cmp.Compare(a.Container, b.Container) })
	raw, err := json.Marshal(mf)
	if err != nil {
		return fmt.Errorf("encode the enforcer's memory: %w", err)
	}
	if string(raw) == string(m.saved) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(m.path), filepath.Base(m.path)+".*")
	if err != nil {
		return fmt.Errorf("write the enforcer's memory: %w", err)
	}
	_, err = tmp.Write(raw)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), m.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write the enforcer's memory %s: %w", m.path, err)
	}
	m.saved = raw
	return nil
}
