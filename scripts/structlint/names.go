package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
)

// allowedRepeats are the exported type names that more than one package
// may define, where the repeat is the clearer name: each part's settings
// (Options, or Config where the part calls them so), each role's Role,
// the API clients a role or part is given, and the metrics a consumer
// declares it feeds.
var allowedRepeats = map[string]bool{"Options": true, "Config": true, "Role": true, "API": true, "Metrics": true}

// repeatedNames reports each exported type name, alias or not, defined in
// two or more non-test packages of vgpud (the tools under scripts/
// aside), unless allowed.
func repeatedNames(m *module) []string {
	where := map[string][]string{}
	for _, dir := range m.dirs() {
		if topDir(dir) == "scripts" {
			continue
		}
		seen := map[string]bool{}
		for _, f := range m.pkgs[dir].files {
			if f.test || f.ast.Name.Name == "main" {
				continue
			}
			for _, d := range f.ast.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					name := s.(*ast.TypeSpec).Name.Name
					if ast.IsExported(name) && !seen[name] {
						seen[name] = true
						where[name] = append(where[name], filepath.ToSlash(dir))
					}
				}
			}
		}
	}
	var names []string
	for n, dirs := range where {
		if len(dirs) > 1 && !allowedRepeats[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("repeated type name: %s is defined in %s; give each a name that says what it is", n, strings.Join(where[n], ", "))
	}
	return out
}
