package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Each planted fault fails the check with a finding that names it; the
// clean tree, with a part's flag, an allowed repeat, a wallclock test and
// a tagged suite that sleeps, passes.
func TestPlantedFaultsFail(t *testing.T) {
	for _, tc := range []struct {
		tree string
		want []string // each in one finding; none for the clean tree
	}{
		{"clean", nil},
		// node reaches cluster through its part and protocol, in between.
		{"crossrole", []string{"role wall: node depends on cluster (node may not import cluster)", "role wall: node/internal/part depends on cluster (node may not import cluster)", "role wall: protocol depends on cluster (protocol may not import cluster)"}},
		// A literal in a role's package, and new(cli.StringFlag) in another.
		{"flag", []string{"node/flags.go:5: flag outside a part's package: cli.IntFlag in node", "cluster/more.go:5: flag outside a part's package: cli.StringFlag in cluster"}},
		{"names", []string{"repeated type name: Verdict is defined in cluster, node/internal/part"}},
		// A plain unit test, and one a build constraint keeps on linux:
		// go test builds it there all the same.
		{"sleep", []string{"cluster/role_test.go:8: a unit test sleeps on the wall clock", "cluster/linux_test.go:10: a unit test sleeps on the wall clock"}},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			got, err := check(filepath.Join("testdata", tc.tree))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q; want %d: %q", got, len(tc.want), tc.want)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(filepath.ToSlash(g), w)
				}
				if !found {
					t.Errorf("no finding says %q; got %q", w, got)
				}
			}
		})
	}
}
