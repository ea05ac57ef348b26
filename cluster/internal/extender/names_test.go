package extender

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"
)

// nodeNames reads every array encoding/json reads, the same way: plain
// names by the fast scan, anything else by the general decoder.
func TestNodeNamesDecodesAsEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`[]`,
		`["a"]`,
		` [ "node-1" , "node-2","n3" ] `,
		`["a\"b","c"]`,
		`["caf\u00e9", "x"]`,
		"[\"café\", \"x\"]",
		"[\"caf\xe9\"]", // not UTF-8: encoding/json reads U+FFFD
		`["a", null]`,
		`[1]`,
	} {
		var want []string
		wantErr := json.Unmarshal([]byte(in), &want)
		for _, intern := range []*interner{nil, newInterner()} {
			got := nodeNames{intern: intern}
			err := json.Unmarshal([]byte(in), &got)
			if (err != nil) != (wantErr != nil) || (err == nil && !slices.Equal(got.names, want)) {
				t.Errorf("%s: got %q (%v), want %q (%v)", in, got.names, err, want, wantErr)
			}
		}
	}
}

// Names seen before cost no allocation; an interner full of names starts
// afresh instead of growing.
func TestInternedNamesDoNotAllocate(t *testing.T) {
	in := newInterner()
	body := []byte(`["node-1","node-2","node-3"]`)
	strictNames(body, in)
	if allocs := testing.AllocsPerRun(100, func() { strictNames(body, in) }); allocs > 0 {
		t.Errorf("%.0f allocations for the last call's names, want none (its slice)", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		strictNames(body, in)
		strictNames([]byte(`["node-1","node-3"]`), in)
	}); allocs > 2 {
		t.Errorf("%.0f allocations for known names in turn, want 2 (a slice each)", allocs)
	}
	for i := range maxInterned {
		in.m[strconv.Itoa(i)] = ""
	}
	strictNames([]byte(`["new"]`), in)
	if len(in.m) != 1 {
		t.Errorf("interner holds %d names after overflowing, want 1", len(in.m))
	}
}

// The names of a body that repeats the last call's come back as that
// call's slice; any other body gets its own, right whatever the last was.
func TestRepeatedNamesShareTheLastSlice(t *testing.T) {
	in := newInterner()
	read := func(body string) []string {
		t.Helper()
		got, ok := strictNames([]byte(body), in)
		var want []string
		if err := json.Unmarshal([]byte(body), &want); err != nil || !ok || !slices.Equal(got, want) {
			t.Fatalf("%s: got %q (%v), want %q (%v)", body, got, ok, want, err)
		}
		return got
	}
	first := read(`["a","b","c"]`)
	if again := read(`["a","b","c"]`); &again[0] != &first[0] {
		t.Error("the same names again: not the last call's slice")
	}
	for _, body := range []string{`["a","b"]`, `["a","b","c","d"]`, `["a","x","c"]`, `["x"]`, `[]`, `["a","b","c"]`} {
		prev := in.prev
		got := read(body)
		if len(got) > 0 && len(prev) > 0 && &got[0] == &prev[0] && !slices.Equal(got, prev) {
			t.Errorf("%s after %q: shares a slice with other names", body, prev)
		}
	}
	if _, ok := strictNames([]byte(`["a",`), in); ok {
		t.Error("a cut body read")
	}
	if got := read(`["a","b","c"]`); !slices.Equal(in.prev, got) {
		t.Errorf("after a refused body, the last names are %q", in.prev)
	}
}
