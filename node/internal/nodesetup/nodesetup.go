// Package nodesetup is `vgpud node-setup`: the opt-in step that installs or removes vgpud's
// drop-in in the node's runtime configuration, run as root on the node.
// It changes files only; the operator restarts the runtime, which keeps
// running containers running.
package nodesetup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

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

// Run installs (install) or removes (remove) vgpud's drop-in for the
// runtime o names, for vgpud's hook on nriSocket, then prints the preflight's
// verdict on the result and the restart it needs.
func Run(o runtimecheck.Options, nriSocket string, action string, stdout io.Writer) error {
	spec, err := preflight.ParseSpec(o.RuntimeConfig)
	if err != nil || spec.Runtime == "" {
		return cli.Exit(fmt.Sprintf("--%s %q: name the runtime's configuration, e.g. containerd:/etc/containerd/config.toml", runtimecheck.FlagRuntimeConfig, o.RuntimeConfig), 2)
	}
	path, body := dropIn(spec)
	switch action {
	case "install":
		if spec.Runtime == preflight.RuntimeContainerd {
			if err := ensureImport(spec.Path, path, stdout); err != nil {
				return cli.Exit(err.Error(), 1)
			}
		}
		if err := writeFile(path, body); err != nil {
			return cli.Exit(err.Error(), 1)
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	case "remove":
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return cli.Exit(fmt.Sprintf("remove %s: %v", path, err), 1)
		}
		fmt.Fprintf(stdout, "removed %s\n", path)
	default:
		return cli.Exit(fmt.Sprintf("node-setup %q: want install or remove", action), 2)
	}
	// The files alone: the runtime runs them only once restarted.
	v := spec.Read(runtimecheck.Want(nriSocket))
	fmt.Fprintln(stdout, "as the files now read:", preflight.Summary(v))
	for _, p := range v.Problems {
		fmt.Fprintln(stdout, "  -", p)
	}
	unit := map[string]string{preflight.RuntimeContainerd: "containerd", preflight.RuntimeCRIO: "crio"}[spec.Runtime]
	fmt.Fprintf(stdout, "restart the runtime for it to apply (running containers keep running): systemctl restart %s\n", unit)
	if action == "install" && !v.Closed() {
		return cli.Exit("the runtime would not fail closed without vgpud: fix what is listed above", 1)
	}
	return nil
}

// ensureImport makes containerd's main file import the drop-in: it
// creates a main file that only imports it where there is none, adds an
// imports line where the file has none, and refuses to rewrite an
// imports list that does not cover it, or a file below version 3, whose
// containerd refuses a version 3 drop-in.
func ensureImport(main, dropInPath string, stdout io.Writer) error {
	glob := filepath.Join(filepath.Dir(dropInPath), "*.toml")
	if fi, err := os.Lstat(main); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink: add imports = [%q] to the file it points to, by hand", main, glob)
	}
	raw, err := os.ReadFile(main)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stdout, "wrote %s, which imports %s (containerd's defaults otherwise)\n", main, glob)
		return writeFile(main, fmt.Sprintf("version = 3\nimports = [%q]\n", glob))
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", main, err)
	}
	var top struct {
		Version int      `toml:"version"`
		Imports []string `toml:"imports"`
	}
	if err := toml.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("%s is not TOML containerd reads: %w", main, err)
	}
	if top.Version < 3 {
		return fmt.Errorf("%s says version = %d: containerd refuses a version 3 drop-in beside it; run containerd config migrate > %s.new, check it and put it in place, then run this again", main, top.Version, main)
	}
	for _, imp := range top.Imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(main), imp)
		}
		if ok, _ := filepath.Match(filepath.Clean(imp), dropInPath); ok {
			return nil
		}
	}
	if top.Imports != nil {
		return fmt.Errorf("%s imports %q, which does not cover %s: add %q to that list and run this again", main, top.Imports, dropInPath, glob)
	}
	// A top-level key must come before the first table: right after the
	// version line, which is top-level.
	versionLine := regexp.MustCompile(`(?m)^version\s*=\s*\d+[ \t]*(#.*)?$`)
	loc := versionLine.FindIndex(raw)
	if loc == nil {
		return fmt.Errorf("%s: no top-level version line to add imports after: add imports = [%q] at its top", main, glob)
	}
	line := fmt.Sprintf("\nimports = [%q]", glob)
	out := string(raw[:loc[1]]) + line + string(raw[loc[1]:])
	backup := main + ".vgpud-backup"
	if err := writeFile(backup, string(raw)); err != nil {
		return err
	}
	if err := writeFile(main, out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "added imports = [%q] to %s (the file before: %s)\n", glob, main, backup)
	return nil
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
