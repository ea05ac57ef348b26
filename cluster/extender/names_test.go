package extender

import (
	"encoding/json"
	"slices"
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
		`["a", null]`,
		`[1]`,
	} {
		var want []string
		wantErr := json.Unmarshal([]byte(in), &want)
		var got nodeNames
		err := json.Unmarshal([]byte(in), &got)
		if (err != nil) != (wantErr != nil) || (err == nil && !slices.Equal([]string(got), want)) {
			t.Errorf("%s: got %q (%v), want %q (%v)", in, got, err, want, wantErr)
		}
	}
}
