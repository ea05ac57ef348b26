package podmodel

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Bounds on a pod's GPU selector annotations. Each entry is matched
// against every GPU of every candidate node on each filter call, and a
// tenant may patch a pending pod's annotations at any time: a 250 KiB
// list made one filter cost seconds. No real selection names more.
const (
	MaxSelectorEntries = 64
	MaxSelectorBytes   = 4 << 10
)

// Selectors are a pod's GPU type and UUID selector annotations, read.
type Selectors struct {
	UseTypes, NoUseTypes, UseUUIDs, NoUseUUIDs []string
}

// SelectorKeys are the annotations Selectors reads, in its field order.
func SelectorKeys() [4]string {
	return [4]string{wellknown.AnnotationUseGPUType, wellknown.AnnotationNoUseGPUType, wellknown.AnnotationUseGPUUUID, wellknown.AnnotationNoUseGPUUUID}
}

// SelectorsOf reads the selector annotations of a, refusing one over
// the bounds with a message that says what to change.
func SelectorsOf(a map[string]string) (Selectors, error) {
	var s Selectors
	fields := []*[]string{&s.UseTypes, &s.NoUseTypes, &s.UseUUIDs, &s.NoUseUUIDs}
	for i, k := range SelectorKeys() {
		v, ok := a[k]
		if !ok {
			continue
		}
		if len(v) > MaxSelectorBytes {
			return Selectors{}, fmt.Errorf("annotation %s is longer than %d bytes: name fewer GPU types or UUIDs", k, MaxSelectorBytes)
		}
		if n := strings.Count(v, ",") + 1; n > MaxSelectorEntries {
			return Selectors{}, fmt.Errorf("annotation %s lists %d entries, more than %d: name fewer GPU types or UUIDs", k, n, MaxSelectorEntries)
		}
		*fields[i] = list(v)
	}
	return s, nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
