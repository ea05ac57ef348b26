package extender

import (
	"encoding/json"
	"strings"
)

// fastArgs reads the ExtenderArgs a cache-capable kube-scheduler sends
// (the pod, and node names that are plain DNS names) in one pass over
// the names, where encoding/json scanned them three times (validation,
// the skip to the value's end, the names' own read) and the pod twice:
// that was most of a filter's decoding, and a tenth of the leader's CPU
// per pod. It answers only for a body it reads exactly as encoding/json
// would, ok false for anything else (escapes, non-ASCII keys or names, a
// key that matches a field only by case, Node objects, malformed JSON),
// which the caller then decodes in full. The pod comes back as its bytes
// in b, checked to be valid JSON.
func fastArgs(b []byte, in *interner) (pod []byte, names []string, namesSet bool, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, nil, false, skipSpace(b, i+1) == len(b)
	}
	for {
		key, next, ok := plainString(b, i)
		if !ok {
			return nil, nil, false, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, false, false
		}
		i = skipSpace(b, i+1)
		end, ok := valueEnd(b, i)
		if !ok {
			return nil, nil, false, false
		}
		value := b[i:end]
		switch {
		case string(key) == "Pod":
			if !json.Valid(value) {
				return nil, nil, false, false
			}
			pod = value
		case string(key) == "NodeNames":
			if string(value) != "null" { // encoding/json leaves names as they were
				if names, ok = strictNames(value, in); !ok {
					return nil, nil, false, false
				}
				namesSet = true
			}
		case string(key) == "Nodes":
			if string(value) != "null" {
				return nil, nil, false, false
			}
		case strings.EqualFold(string(key), "Pod"), strings.EqualFold(string(key), "NodeNames"), strings.EqualFold(string(key), "Nodes"):
			// encoding/json matches field names regardless of case.
			return nil, nil, false, false
		default:
			if !json.Valid(value) {
				return nil, nil, false, false
			}
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, nil, false, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return pod, names, namesSet, skipSpace(b, i+1) == len(b)
		default:
			return nil, nil, false, false
		}
	}
}

// skipSpace is the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the JSON string at b[i] if it is printable ASCII
// without escapes: its content, and the index after its closing quote.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// maxFastDepth is the deepest value fastArgs reads: a pod nests a dozen
// levels, and a value at encoding/json's own limit must be refused by it
// as part of the body, not passed here on its own.
const maxFastDepth = 1000

// valueEnd is the index just past the JSON value starting at b[i]: its
// extent only, by brackets and strings; the caller checks the value
// itself where it keeps it.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			// To the closing quote, past any escaped character.
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return 0, false
			}
			if depth == 0 {
				return j + 1, true
			}
		case '{', '[':
			if depth++; depth > maxFastDepth {
				return 0, false
			}
		case '}', ']':
			if depth == 0 { // the end of the object holding a literal
				return j, j > i
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	// A literal or number that ends the input, which an object never does.
	return 0, false
}
