package main

import (
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// module is the parsed tree: its path and its packages by directory.
type module struct {
	path string
	fset *token.FileSet
	pkgs map[string]*pkg // by directory, relative to the root, "." for it
}

// pkg is one directory's Go files, its tests apart.
type pkg struct {
	dir   string
	name  string // the package clause of its non-test files
	files []*file
}

type file struct {
	path string // relative to the root
	ast  *ast.File
	test bool
	// tagged says a build constraint keeps the file out of a plain
	// go test (the end-to-end and bench suites).
	tagged bool
}

// importPath is the package's import path.
func (m *module) importPath(dir string) string {
	if dir == "." {
		return m.path
	}
	return m.path + "/" + filepath.ToSlash(dir)
}

// load parses every .go file under root but testdata, hidden
// directories and nested modules.
func load(root string) (*module, error) {
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var path string
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			path = strings.Trim(f[1], `"`)
		}
	}
	if path == "" {
		return nil, fmt.Errorf("%s: no module line", filepath.Join(root, "go.mod"))
	}
	m := &module{path: path, fset: token.NewFileSet(), pkgs: map[string]*pkg{}}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // its own module
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(m.fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(rel)
		pk := m.pkgs[dir]
		if pk == nil {
			pk = &pkg{dir: dir}
			m.pkgs[dir] = pk
		}
		fl := &file{path: rel, ast: f, test: strings.HasSuffix(rel, "_test.go"), tagged: hasBuildConstraint(f) || otherPlatform(rel)}
		if !fl.test && !fl.tagged && pk.name == "" {
			pk.name = f.Name.Name
		}
		pk.files = append(pk.files, fl)
		return nil
	})
	return m, err
}

// otherPlatform says whether a file's name keeps it to a system or an
// architecture this project does not build for (x_windows.go,
// x_darwin_test.go).
func otherPlatform(path string) bool {
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".go"), "_test")
	for _, p := range []string{"windows", "darwin", "freebsd", "netbsd", "openbsd", "plan9", "solaris", "aix", "illumos", "ios", "android", "js", "wasip1", "386", "arm", "ppc64le", "s390x", "riscv64", "mips", "wasm"} {
		if strings.HasSuffix(name, "_"+p) {
			return true
		}
	}
	return false
}

// hasBuildConstraint says whether f's //go:build line keeps it out of a
// plain go test on this project's machines (linux, amd64 or arm64, cgo):
// the tagged suites' tags (e2e, bench, skewnext) are not set.
func hasBuildConstraint(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				continue
			}
			return !expr.Eval(func(tag string) bool {
				switch tag {
				case "linux", "unix", "amd64", "arm64", "cgo", "gc":
					return true
				}
				return strings.HasPrefix(tag, "go1.")
			})
		}
	}
	return false
}

// imports are the module's own packages f imports, by directory.
func (m *module) imports(f *file) []string {
	var out []string
	for _, im := range f.ast.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			continue
		}
		if p == m.path {
			out = append(out, ".")
		} else if rest, ok := strings.CutPrefix(p, m.path+"/"); ok {
			out = append(out, filepath.FromSlash(rest))
		}
	}
	return out
}

// dirs are the packages' directories, sorted.
func (m *module) dirs() []string {
	out := make([]string, 0, len(m.pkgs))
	for d := range m.pkgs {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// pos is where n is, as path:line.
func (m *module) pos(n ast.Node) string {
	p := m.fset.Position(n.Pos())
	return fmt.Sprintf("%s:%d", p.Filename, p.Line)
}
