package usage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
)

// Containers is what the runtime hook registered: the containers this
// node granted a slice, by the runtime's container ID. The hook is its
// only writer; a container's processes name it through their cgroup.
type Containers struct {
	mu   sync.RWMutex
	byID map[string]*Container
}

// NewContainers returns an empty register.
func NewContainers() *Containers { return &Containers{byID: map[string]*Container{}} }

// Add registers c (the hook granted it a slice); a later Add of the same
// ID replaces it.
func (r *Containers) Add(c Container) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[c.ID] = &c
}

// RemovePod forgets every container of the pod with that UID, and
// returns them.
func (r *Containers) RemovePod(uid string) []Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []Container
	for id, c := range r.byID {
		if c.PodUID == uid {
			gone = append(gone, *c)
			delete(r.byID, id)
		}
	}
	return gone
}

// Has reports whether a container of the pod namespace/name is registered.
func (r *Containers) Has(namespace, pod string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, c := range r.byID {
		if c.Namespace == namespace && c.Pod == pod {
			return true
		}
	}
	return false
}

// Retain forgets every container whose ID is not in ids, and returns
// them.
func (r *Containers) Retain(ids map[string]bool) []Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []Container
	for id, c := range r.byID {
		if !ids[id] {
			gone = append(gone, *c)
			delete(r.byID, id)
		}
	}
	return gone
}

// Get is the container with that runtime ID; nil if none was granted.
func (r *Containers) Get(id string) *Container {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byID[id]
}

// Len is how many containers are registered.
func (r *Containers) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byID)
}

// Procfs reads which container a host PID runs in from /proc.
type Procfs struct {
	// Root is the host's /proc as this process sees it: "/proc" with the
	// host's PID namespace.
	Root string
}

// ContainerID is the runtime's ID of the container whose cgroup holds
// pid, read from /proc/<pid>/cgroup: the last element of the cgroup path,
// stripped of the runtime's decorations (cgroupfs
// ".../pod<uid>/<id>", systemd ".../cri-containerd-<id>.scope"). ok is
// false for a process in no container's cgroup (the host's).
func (p Procfs) ContainerID(pid int) (id string, ok bool, err error) {
	raw, err := os.ReadFile(path.Join(p.Root, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", false, fmt.Errorf("read the cgroup of process %d: %w", pid, err)
	}
	id, ok = containerIDFromCgroup(raw)
	return id, ok, nil
}

// containerIDFromCgroup reads a /proc/<pid>/cgroup file: the first line
// whose path names a container, the unified hierarchy's ("0::/path")
// first, else a controller's; all name the same container.
func containerIDFromCgroup(raw []byte) (string, bool) {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			paths = append([]string{parts[2]}, paths...)
		} else {
			paths = append(paths, parts[2])
		}
	}
	for _, p := range paths {
		if id, ok := containerIDFromPath(p); ok {
			return id, true
		}
	}
	return "", false
}

// containerIDFromPath is the container ID in a cgroup path: the
// outermost element that is 64 hex digits, after an optional
// "<runtime>-" and before an optional ".scope". Outermost: a container
// that may write its own cgroup tree can make sub-cgroups below its own,
// named as it likes (another container's ID among them), but not above.
func containerIDFromPath(p string) (string, bool) {
	for _, elem := range strings.Split(p, "/") {
		elem = strings.TrimSuffix(elem, ".scope")
		if i := strings.LastIndexAny(elem, "-:"); i >= 0 {
			elem = elem[i+1:]
		}
		if len(elem) == 64 && strings.Trim(elem, "0123456789abcdef") == "" {
			return elem, true
		}
	}
	return "", false
}
