package preflight

import (
	"fmt"
	"strings"
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

// Check reads the runtime's configuration and judges it.
func (s Spec) Check(w Want) Verdict {
	if s.Runtime == RuntimeCRIO {
		return CRIO(s.Path, w)
	}
	return Containerd(s.Path, w)
}
