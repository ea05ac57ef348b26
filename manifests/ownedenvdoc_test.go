package manifests

import (
	"os"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/containerenv"
)

// docs/security.md's table of owned names is protocol/containerenv/owned.go's lists.
func TestOwnedEnvDocMatchesTheCode(t *testing.T) {
	raw, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "<!-- owned-env:")
	table, _, ok2 := strings.Cut(rest, "<!-- end owned-env -->")
	if !ok || !ok2 {
		t.Fatal("docs/security.md has no owned-env table")
	}
	var want []string
	row := func(name, where string) {
		var values []string
		for _, v := range containerenv.AllowedEnvValues(name) {
			values = append(values, "`"+v+"`")
		}
		want = append(want, "| `"+name+"` | "+where+" | "+strings.Join(values, ", ")+" |")
	}
	for _, n := range containerenv.DeviceEnvNames() {
		row(n, "every container")
	}
	for _, n := range containerenv.SliceEnvNames() {
		row(n, "containers that ask for a GPU")
	}
	for _, p := range containerenv.SliceEnvPrefixes() {
		row(p+"<i>", "containers that ask for a GPU")
	}
	var got []string
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "| `") {
			got = append(got, strings.ReplaceAll(l, "|  |", "| |"))
		}
	}
	fixed := make([]string, len(want))
	for i, w := range want {
		fixed[i] = strings.ReplaceAll(w, "|  |", "| |")
	}
	if strings.Join(got, "\n") != strings.Join(fixed, "\n") {
		t.Errorf("docs/security.md's owned-env table:\n%s\nwant (from protocol/containerenv/owned.go):\n%s", strings.Join(got, "\n"), strings.Join(fixed, "\n"))
	}
}
