//go:build skewnext

package protocol

import (
	"bytes"
	"encoding/json"
)

// withNewerFields makes this build write what a newer minor release
// would: fields this release does not know, beside the ones it does, at
// the top of the value and in each GPU or container. The end-to-end
// suite runs it on one node, ahead of the others (scripts/e2e/cluster,
// rolling upgrade); it is never released.
func withNewerFields(b []byte) ([]byte, error) {
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // MiB past 2^53 stay exact
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	v["next"] = map[string]any{"release": "next", "topology": []string{"nvlink"}}
	for _, list := range []string{"gpus", "containers"} {
		items, _ := v[list].([]any)
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				m["nextField"] = 1
			}
		}
	}
	return json.Marshal(v)
}
