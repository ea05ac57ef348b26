package extender

import (
	"bytes"
	"encoding/json"
)

// nodeNames is ExtenderArgs.NodeNames, decoded without reflection: a
// cache-capable kube-scheduler sends every candidate's name on every call
// (1000 names for 1000 nodes), and node names are plain DNS labels, so a
// scan for quotes reads them. A name with an escape takes the general
// decoder.
type nodeNames []string

func (n *nodeNames) UnmarshalJSON(b []byte) error {
	names, ok := plainStrings(b)
	if !ok {
		var slow []string
		if err := json.Unmarshal(b, &slow); err != nil {
			return err
		}
		names = slow
	}
	*n = names
	return nil
}

// plainStrings reads a JSON array of strings that hold no escapes; ok is
// false for anything else, which the caller decodes in full. encoding/json
// has already checked that b is valid JSON.
func plainStrings(b []byte) (out []string, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	if bytes.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
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
		out = append(out, string(rest[1:1+end]))
		rest = rest[end+2:]
	}
}
