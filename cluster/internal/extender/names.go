package extender

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
)

// nodeNames is ExtenderArgs.NodeNames, decoded without reflection: a
// cache-capable kube-scheduler sends every candidate's name on every call
// (1000 names for 1000 nodes), and node names are plain DNS labels, so a
// scan for quotes reads them (strictNames, as fastArgs does). A name with
// an escape or a byte past ASCII takes the general decoder. Names the
// interner has seen come back as the same strings, without an
// allocation each.
type nodeNames struct {
	intern *interner // may be nil
	names  []string
	set    bool // present and not null
}

func (n *nodeNames) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	names, ok := strictNames(bytes.TrimSpace(b), n.intern)
	if !ok {
		var slow []string
		if err := json.Unmarshal(b, &slow); err != nil {
			return err
		}
		names = slow
	}
	n.names, n.set = names, true
	return nil
}

// maxInterned bounds the interner: more distinct names than any cluster
// has nodes start it afresh.
const maxInterned = 100000

// interner hands out one string per node name: the scheduler sends the
// same names on every call, and a string each was most of a filter's
// allocations.
type interner struct {
	mu sync.Mutex
	m  map[string]string
	// prev are the names of the last body read by strictNames, in order.
	prev []string
}

func newInterner() *interner { return &interner{m: map[string]string{}} }

// lockedString is b as a string, the interned one where in has it; the
// caller holds in.mu. A nil interner interns nothing.
func (in *interner) lockedString(b []byte) string {
	if in == nil {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok { // no allocation for the lookup
		return s
	}
	if len(in.m) >= maxInterned {
		clear(in.m)
	}
	s := string(b)
	in.m[s] = s
	return s
}

// strictNames reads a JSON array of plain strings (plainString), each
// interned by in (nil: none). With in, the slice may be the one it gave
// the last call, shared: callers only read it.
func strictNames(b []byte, in *interner) ([]string, bool) {
	// An escape anywhere declines before the names are counted: a body of
	// escaped quotes would size a slice it never fills.
	if len(b) < 2 || b[0] != '[' || bytes.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
	var prev, out []string
	if in != nil {
		in.mu.Lock()
		defer in.mu.Unlock()
		// kube-scheduler sends its nodes in the same order call after
		// call: the last call's names, compared in place, are cheaper
		// than a lookup each, and while every name is the last call's
		// (same), its slice is the answer, shared: a filter's names
		// slice was its largest allocation.
		prev = in.prev
	}
	// Room for every name, a pair of quotes each (no escapes), made only
	// once the names are not the last call's.
	room := func() int { return bytes.Count(b, []byte{'"'}) / 2 }
	same, n := in != nil, 0 // n names read; out holds them once !same
	if !same {
		out = make([]string, 0, room())
	}
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == ']' {
		if i+1 != len(b) {
			return nil, false
		}
		if same {
			out = []string{}
			in.prev = out
		}
		return out, true
	}
	for {
		s, next, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		switch {
		case same && n < len(prev) && prev[n] == string(s):
		case same:
			same = false
			out = make([]string, n, max(n+1, room()))
			copy(out, prev[:n])
			fallthrough
		default:
			if k := len(out); k < len(prev) && prev[k] == string(s) {
				out = append(out, prev[k])
			} else {
				out = append(out, in.lockedString(s))
			}
		}
		n++
		i = skipSpace(b, next)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			if i+1 != len(b) {
				return nil, false
			}
			if same {
				if n == len(prev) {
					return prev, true
				}
				out = slices.Clone(prev[:n]) // fewer: not the last call's slice
			}
			if in != nil {
				in.prev = out
			}
			return out, true
		default:
			return nil, false
		}
	}
}
