package main

import (
	"fmt"
	"go/ast"
	"strconv"
	"strings"
)

// wallclock is the line a test file gives when its waits are a real
// process's, which no fake clock can hurry: the reason follows it.
const wallclock = "//vgpud:wallclock "

// unitTestSleeps reports each time.Sleep in a unit test: a test file a
// plain go test builds, that gives no //vgpud:wallclock reason.
func unitTestSleeps(m *module) []string {
	var out []string
	for _, dir := range m.dirs() {
		for _, f := range m.pkgs[dir].files {
			if !f.test || f.tagged || saysWallclock(f.ast) {
				continue
			}
			timeName := importName(f.ast, "time")
			if timeName == "" {
				continue
			}
			ast.Inspect(f.ast, func(n ast.Node) bool {
				// time.Sleep, called or taken as a value; Sleep where time
				// is dot-imported.
				var at ast.Node
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == timeName && n.Sel.Name == "Sleep" {
						at = n
					}
				case *ast.Ident:
					if timeName == "." && n.Name == "Sleep" {
						at = n
					}
				}
				if at != nil {
					out = append(out, fmt.Sprintf("%s: a unit test sleeps on the wall clock: wait for what it waits for (a channel, synctest.Wait, a fake clock's Step), or give the file a %sREASON line where the wait is a real process's", m.pos(at), wallclock))
					return false
				}
				return true
			})
		}
	}
	return out
}

// saysWallclock says whether f has a //vgpud:wallclock line with a reason.
func saysWallclock(f *ast.File) bool {
	for _, g := range f.Comments {
		for _, c := range g.List {
			if why, ok := strings.CutPrefix(c.Text, wallclock); ok && strings.TrimSpace(why) != "" {
				return true
			}
		}
	}
	return false
}

// importName is the name f imports path under; "" if it does not.
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == path {
			if im.Name != nil {
				return im.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}
