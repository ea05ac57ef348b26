package leader

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMayLead(t *testing.T) {
	dir := t.TempDir()
	n := 0
	file := func(s string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("leader-nodes-%d", n))
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, file, node string
		ok               bool
	}{
		{"no setting", "", "n1", true},
		{"no file (the ConfigMap has no key)", filepath.Join(dir, "absent"), "n1", true},
		{"no name", file(" \n"), "n1", true},
		{"named, spaces and a newline trimmed", file("n0, n1 ,\n"), "n1", true},
		{"not named", file("n0,n2"), "n1", false},
		{"a node name that is a prefix", file("n10"), "n1", false},
		{"no node known", file("n0"), "", false},
	} {
		err := MayLead(tc.file, tc.node)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "leader-nodes") {
			t.Errorf("%s: %v does not say which setting", tc.name, err)
		}
	}
}
