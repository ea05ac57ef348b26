package preflight

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Runtimes the check reads.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
)

// Spec names a runtime and its main configuration file, "KIND:PATH";
// "" checks nothing.
type Spec struct {
	Runtime string
	Path    string
}

// ParseSpec reads "containerd:/etc/containerd/config.toml" or
// "cri-o:/etc/crio/crio.conf"; "" is the zero Spec.
func ParseSpec(s string) (Spec, error) {
	if s == "" {
		return Spec{}, nil
	}
	kind, path, ok := strings.Cut(s, ":")
	if !ok || (kind != RuntimeContainerd && kind != RuntimeCRIO) || !strings.HasPrefix(path, "/") {
		return Spec{}, fmt.Errorf("%q is not KIND:PATH with KIND %s or %s and PATH absolute, e.g. %s:/etc/containerd/config.toml", s, RuntimeContainerd, RuntimeCRIO, RuntimeContainerd)
	}
	return Spec{Runtime: kind, Path: path}, nil
}

// Read judges the runtime's files alone, whether or not the runtime runs
// them yet: what node-setup has just written, before the restart.
func (s Spec) Read(w Want) Verdict {
	if s.Runtime == RuntimeCRIO {
		return CRIO(s.Path, w)
	}
	return Containerd(s.Path, w)
}

// Check reads the runtime's configuration and judges it. Files that
// fail closed count only once the runtime runs them: where NRI's socket
// (w.Socket) is missing, or older than the newest file, the runtime has
// not started with them and the verdict is Unknown until it restarts.
func (s Spec) Check(w Want) Verdict {
	v := s.Read(w)
	if v.Result != FailsClosed || w.Socket == "" {
		return v
	}
	fi, err := os.Stat(w.Socket)
	switch {
	case err != nil:
		v.Result = Unknown
		v.Problems = append(v.Problems, fmt.Sprintf("the files fail closed, but there is no NRI socket at %s (%v): the runtime runs without NRI or another configuration; restart it", w.Socket, err))
	case v.newest.After(fi.ModTime()):
		v.Result = Unknown
		v.Problems = append(v.Problems, fmt.Sprintf("the files fail closed, but one changed at %s, after the runtime made its NRI socket (%s): restart the runtime for them to apply", v.newest.UTC().Format(time.RFC3339), fi.ModTime().UTC().Format(time.RFC3339)))
	}
	return v
}
