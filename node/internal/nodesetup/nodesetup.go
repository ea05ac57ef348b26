// Package nodesetup is `vgpud node-setup`: it installs or removes vgpud's
// drop-in in the node's runtime configuration. By hand on the host it
// changes files only, and the operator restarts the runtime; in the
// DaemonSet's privileged init container (InCluster) it also restarts the
// runtime where its files changed, one node at a time, and reports the
// outcome on the node. Running containers keep running either way.
package nodesetup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
)

// dropIn is where vgpud's drop-in goes for spec, and what it says.
func dropIn(spec preflight.Spec) (path, body string) {
	dir := filepath.Dir(spec.Path)
	if spec.Runtime == preflight.RuntimeCRIO {
		return filepath.Join(dir, "crio.conf.d", "90-vgpud.conf"), manifests.CRIODropIn
	}
	return filepath.Join(dir, "conf.d", "vgpud.toml"), manifests.ContainerdDropIn
}

// Run is `vgpud node-setup install|remove` on the node's host, by hand:
// it changes vgpud's drop-in for the runtime o names, for vgpud's hook on
// nriSocket, then prints the preflight's verdict on the result and the
// restart it needs. An install whose files would not fail closed is
// undone.
func Run(o runtimecheck.Options, nriSocket string, action string, stdout io.Writer) error {
	spec, err := preflight.ParseSpec(o.RuntimeConfig)
	if err != nil || spec.Runtime == "" {
		return cli.Exit(fmt.Sprintf("--%s %q: name the runtime's configuration, e.g. containerd:/etc/containerd/config.toml", runtimecheck.FlagRuntimeConfig, o.RuntimeConfig), 2)
	}
	var done Applied
	switch action {
	case "install":
		done, err = Install(spec, nriSocket)
	case "remove":
		done, err = Remove(spec)
	default:
		return cli.Exit(fmt.Sprintf("node-setup %q: want install or remove", action), 2)
	}
	for _, n := range done.Notes {
		fmt.Fprintln(stdout, n)
	}
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	// The files alone: the runtime runs them only once restarted.
	v := spec.Read(runtimecheck.Want(nriSocket))
	fmt.Fprintln(stdout, "as the files now read:", preflight.Summary(v))
	for _, p := range v.Problems {
		fmt.Fprintln(stdout, "  -", p)
	}
	fmt.Fprintf(stdout, "restart the runtime for it to apply (running containers keep running): systemctl restart %s\n", daemon(spec.Runtime))
	return nil
}

// Applied is what Install or Remove changed.
type Applied struct {
	// Changed is set when a file's content changed.
	Changed bool
	// Notes say what was done to which file, for a person.
	Notes []string
	// Undo puts back what was changed; nil when nothing was.
	Undo func() error
}

// edit is one file's new content, and what it held before, to undo it.
type edit struct {
	path    string
	after   string
	remove  bool   // delete the file instead
	before  []byte // nil when there was no file
	existed bool
	changed bool // apply changed it: undo puts it back
}

// Install puts vgpud's drop-in in place for spec and, for containerd,
// makes the main file import it; it changes nothing it would have to
// refuse. Files that would then not fail closed for vgpud's hook on
// nriSocket are put back as they were, and the error says why.
func Install(spec preflight.Spec, nriSocket string) (Applied, error) {
	path, body := dropIn(spec)
	var edits []edit
	var notes []string
	if spec.Runtime == preflight.RuntimeContainerd {
		e, note, err := importEdit(spec.Path, path)
		if err != nil {
			return Applied{}, err
		}
		if e != nil {
			edits, notes = append(edits, *e), append(notes, note)
		}
	}
	edits = append(edits, edit{path: path, after: body})
	done, err := apply(edits)
	done.Notes = append(notes, done.Notes...)
	if err != nil {
		return done, err
	}
	if done.Changed {
		done.Undo = func() error { return undo(edits) }
	}
	if v := spec.Read(runtimecheck.Want(nriSocket)); !v.Closed() {
		if uerr := undo(edits); uerr != nil {
			return done, fmt.Errorf("the files would not fail closed (%s), and putting them back failed: %w", strings.Join(v.Problems, "; "), uerr)
		}
		return Applied{Notes: []string{"put every file back as it was"}}, fmt.Errorf("with vgpud's drop-in the runtime would still not fail closed, so nothing was changed: %s", strings.Join(v.Problems, "; "))
	}
	return done, nil
}

// Remove deletes vgpud's drop-in for spec. containerd's imports line
// stays: it imports a directory, which may hold other files.
func Remove(spec preflight.Spec) (Applied, error) {
	path, _ := dropIn(spec)
	edits := []edit{{path: path, remove: true}}
	done, err := apply(edits)
	if done.Changed {
		done.Undo = func() error { return undo(edits) }
	}
	return done, err
}

// apply makes edits in order, each file replaced at once, skipping those
// whose content is already right; on a failure it undoes the ones made.
func apply(edits []edit) (Applied, error) {
	var done Applied
	for i := range edits {
		e := &edits[i]
		raw, err := os.ReadFile(e.path)
		switch {
		case err == nil:
			e.before, e.existed = raw, true
		case errors.Is(err, fs.ErrNotExist):
		default:
			return done, fmt.Errorf("read %s: %w", e.path, err)
		}
		if e.remove {
			if !e.existed {
				continue
			}
			if err := os.Remove(e.path); err != nil {
				return done, errors.Join(fmt.Errorf("remove %s: %w", e.path, err), undo(edits[:i]))
			}
			e.changed, done.Changed = true, true
			done.Notes = append(done.Notes, "removed "+e.path)
			continue
		}
		if e.existed && string(e.before) == e.after {
			continue
		}
		if err := writeFile(e.path, e.after); err != nil {
			return done, errors.Join(err, undo(edits[:i+1]))
		}
		e.changed, done.Changed = true, true
		done.Notes = append(done.Notes, "wrote "+e.path)
	}
	return done, nil
}

// undo puts back what apply changed of edits, last first, where a file
// still reads as apply left it: one changed since (by configuration
// management, an admin) is left as it is, and said. A directory apply
// made stays: its time says the runtime's files changed
// (InCluster.runsOlderFiles).
func undo(edits []edit) error {
	var errs []error
	for i := len(edits) - 1; i >= 0; i-- {
		e := edits[i]
		if !e.changed {
			continue
		}
		now, err := os.ReadFile(e.path)
		gone := errors.Is(err, fs.ErrNotExist)
		if err != nil && !gone {
			errs = append(errs, fmt.Errorf("read %s: %w", e.path, err))
			continue
		}
		if (e.remove && !gone) || (!e.remove && (gone || string(now) != e.after)) {
			errs = append(errs, fmt.Errorf("%s changed since vgpud wrote it: left as it is", e.path))
			continue
		}
		switch {
		case e.existed:
			errs = append(errs, writeFile(e.path, string(e.before)))
		case !gone:
			if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove %s: %w", e.path, err))
			}
		}
	}
	return errors.Join(errs...)
}

// importEdit is the edit that makes containerd's main file import the
// drop-in, nil where it does already: a main file that only imports it
// where there is none, an imports line where the file has none. It
// refuses to rewrite an imports list that does not cover the drop-in, or
// a file below version 3, whose containerd refuses a version 3 drop-in.
func importEdit(main, dropInPath string) (*edit, string, error) {
	glob := filepath.Join(filepath.Dir(dropInPath), "*.toml")
	if fi, err := os.Lstat(main); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, "", fmt.Errorf("%s is a symlink: add imports = [%q] to the file it points to, by hand", main, glob)
	}
	raw, err := os.ReadFile(main)
	if errors.Is(err, fs.ErrNotExist) {
		return &edit{path: main, after: fmt.Sprintf("version = 3\nimports = [%q]\n", glob)},
			fmt.Sprintf("%s imports %s (containerd's defaults otherwise)", main, glob), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", main, err)
	}
	var top struct {
		Version int      `toml:"version"`
		Imports []string `toml:"imports"`
	}
	if err := toml.Unmarshal(raw, &top); err != nil {
		return nil, "", fmt.Errorf("%s is not TOML containerd reads: %w", main, err)
	}
	if top.Version < 3 {
		return nil, "", fmt.Errorf("%s says version = %d: containerd refuses a version 3 drop-in beside it; run containerd config migrate > %s.new, check it and put it in place, then run this again", main, top.Version, main)
	}
	for _, imp := range top.Imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(main), imp)
		}
		if ok, _ := filepath.Match(filepath.Clean(imp), dropInPath); ok {
			return nil, "", nil
		}
	}
	if top.Imports != nil {
		return nil, "", fmt.Errorf("%s imports %q, which does not cover %s: add %q to that list and run this again", main, top.Imports, dropInPath, glob)
	}
	// A top-level key must come before the first table: right after the
	// version line, which is top-level.
	versionLine := regexp.MustCompile(`(?m)^version\s*=\s*\d+[ \t]*(#.*)?$`)
	loc := versionLine.FindIndex(raw)
	if loc == nil {
		return nil, "", fmt.Errorf("%s: no top-level version line to add imports after: add imports = [%q] at its top", main, glob)
	}
	out := string(raw[:loc[1]]) + fmt.Sprintf("\nimports = [%q]", glob) + string(raw[loc[1]:])
	return &edit{path: main, after: out}, fmt.Sprintf("added imports = [%q] to %s", glob, main), nil
}

// writeFile replaces path's content at once, so the runtime never reads
// half a file: a new file beside it, synced, renamed over it, and the
// directory synced. It keeps an existing file's mode and refuses a
// symlink, whose target a rename would cut off.
func writeFile(path, body string) error {
	mode := fs.FileMode(0o644)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink: edit the file it points to, by hand", path)
		}
		mode = fi.Mode().Perm()
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".vgpud-*")
	if err != nil {
		return fmt.Errorf("write beside %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // gone once renamed
	_, err = f.WriteString(body)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("put %s in place: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
