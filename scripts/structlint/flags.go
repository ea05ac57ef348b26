package main

import (
	"fmt"
	"go/ast"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const cliPath = "github.com/urfave/cli/v2"

// cliInterfaces are urfave/cli's flag interfaces, which a role may name
// (to list or render flags) without declaring one.
var cliInterfaces = map[string]bool{"Flag": true, "DocGenerationFlag": true, "DocGenerationMultiValueFlag": true, "VisibleFlag": true,
	"RequiredFlag": true, "CategorizableFlag": true, "ActionableFlag": true}

// isPart says whether a package may declare flags: a part's, under an
// internal/ directory, or webhook/, a part at the top level; and the
// tools under scripts/, which are no part of vgpud.
func isPart(dir string) bool {
	elems := strings.Split(filepath.ToSlash(dir), "/")
	return slices.Contains(elems, "internal") || elems[0] == "webhook" || elems[0] == "scripts"
}

// flagsInParts reports each flag declared outside a part's package: a
// composite literal of urfave/cli's *Flag types in a non-test file.
func flagsInParts(m *module) []string {
	var out []string
	for _, dir := range m.dirs() {
		if isPart(dir) {
			continue
		}
		for _, f := range m.pkgs[dir].files {
			if f.test {
				continue
			}
			cli := cliName(f.ast)
			if cli == "" {
				continue
			}
			// Any mention of a cli.*Flag type but the cli.Flag interface:
			// a literal, new(cli.StringFlag), []*cli.IntFlag{{...}}.
			ast.Inspect(f.ast, func(n ast.Node) bool {
				var name string
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == cli {
						name = n.Sel.Name
					}
				case *ast.Ident:
					if cli == "." {
						name = n.Name
					}
				}
				if name != "" && strings.HasSuffix(name, "Flag") && ast.IsExported(name) && !cliInterfaces[name] {
					out = append(out, fmt.Sprintf("%s: flag outside a part's package: cli.%s in %s; declare it with the settings it sets, in their part's Options (under internal/)", m.pos(n), name, filepath.ToSlash(dir)))
					return false
				}
				return true
			})
		}
	}
	return out
}

// cliName is the name f imports urfave/cli under; "" if it does not.
func cliName(f *ast.File) string {
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == cliPath {
			if im.Name != nil {
				return im.Name.Name
			}
			return "cli"
		}
	}
	return ""
}
