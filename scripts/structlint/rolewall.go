package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// refused are the top-level directories each side may not depend on.
var refused = map[string][]string{
	"node":       {"cluster", "webhook"},
	"kubeletapi": {"cluster", "webhook"},
	"cluster":    {"node", "kubeletapi"},
	"webhook":    {"node", "kubeletapi", "cluster"},
	"protocol":   {"node", "kubeletapi", "cluster", "webhook"},
	"internal":   {"node", "kubeletapi", "cluster", "webhook"},
}

// roleWall reports each package that depends on a side it may not: its
// non-test imports and everything they import, and its tests' imports
// and everything those import.
func roleWall(m *module) []string {
	direct := map[string][]string{} // non-test imports, by package
	tests := map[string][]string{}  // its tests' imports
	for dir, p := range m.pkgs {
		for _, f := range p.files {
			if f.test {
				tests[dir] = append(tests[dir], m.imports(f)...)
			} else {
				direct[dir] = append(direct[dir], m.imports(f)...)
			}
		}
	}
	var out []string
	for _, dir := range m.dirs() {
		side := topDir(dir)
		bad := refused[side]
		if len(bad) == 0 {
			continue
		}
		seen := map[string]bool{}
		var walk func(d string)
		walk = func(d string) {
			for _, im := range direct[d] {
				if !seen[im] {
					seen[im] = true
					walk(im)
				}
			}
		}
		walk(dir)
		for _, im := range tests[dir] {
			if !seen[im] {
				seen[im] = true
				walk(im)
			}
		}
		var deps []string
		for d := range seen {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			for _, r := range bad {
				if topDir(d) == r {
					out = append(out, fmt.Sprintf("role wall: %s depends on %s (%s may not import %s)", filepath.ToSlash(dir), filepath.ToSlash(d), side, r))
				}
			}
		}
	}
	return out
}

// topDir is a directory's first element.
func topDir(dir string) string {
	first, _, _ := strings.Cut(filepath.ToSlash(dir), "/")
	return first
}
