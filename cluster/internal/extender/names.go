package extender

import (
	"bytes"
	"encoding/json"
	"sync"
)

// nodeNames is ExtenderArgs.NodeNames, decoded without reflection: a
// cache-capable kube-scheduler sends every candidate's name on every call
// (1000 names for 1000 nodes), and node names are plain DNS labels, so a
// scan for quotes reads them. A name with an escape takes the general
// decoder. Names the interner has seen come back as the same strings,
// without an allocation each.
type nodeNames struct {
	intern *interner // may be nil
	names  []string
	set    bool // present and not null
}

func (n *nodeNames) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	names, ok := plainStrings(b, n.intern)
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

// plainStrings reads a JSON array of strings that hold no escapes; ok is
// false for anything else, which the caller decodes in full. encoding/json
// has already checked that b is valid JSON.
func plainStrings(b []byte, in *interner) (out []string, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	if bytes.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
	if in != nil {
		in.mu.Lock()
		defer in.mu.Unlock()
	}
	str := in.lockedString
	out = make([]string, 0, bytes.Count(b, []byte{'"'})/2)
	rest := b[1 : len(b)-1]
	for {
		rest = bytes.TrimLeft(rest, " \t\r\n,")
		if len(rest) == 0 {
			return out, true
		}
		if rest[0] != '"' {
			return nil, false // not a string: null, a number, an object
		}
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 {
			return nil, false
		}
		out = append(out, str(rest[1:1+end]))
		rest = rest[end+2:]
	}
}
