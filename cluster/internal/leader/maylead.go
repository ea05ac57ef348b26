package leader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// MayLead says whether a replica on node may lead, by the node names in
// file (--leader-nodes-file): nil when there is no file, it names no
// node, or it names this one. The apiserver's vgpud-lease policy reads
// the same ConfigMap key with the same rule (commas, spaces trimmed).
func MayLead(file, node string) error {
	if file == "" {
		return nil
	}
	raw, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the nodes that may lead: %w", err)
	}
	nodes := leaderNodes(string(raw))
	if len(nodes) == 0 || slices.Contains(nodes, node) {
		return nil
	}
	return fmt.Errorf("node %q is not among the nodes that may lead (%s, the vgpud ConfigMap's leader-nodes)", node, strings.Join(nodes, ", "))
}

// leaderNodes splits a leader-nodes value.
func leaderNodes(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}
