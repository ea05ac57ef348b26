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
	if allocs := testing.AllocsPerRun(100, func() { strictNames(body, in) }); allocs > 1 {
		t.Errorf("%.0f allocations for known names, want 1 (the slice)", allocs)
	}
	for i := range maxInterned {
		in.m[strconv.Itoa(i)] = ""
	}
	strictNames([]byte(`["new"]`), in)
	if len(in.m) != 1 {
		t.Errorf("interner holds %d names after overflowing, want 1", len(in.m))
	}
}
