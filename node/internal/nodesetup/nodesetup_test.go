package nodesetup

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/node/internal/runtimecheck"
)

// node-setup install makes a node fail closed from each starting point
// it accepts, refuses the ones it must not rewrite, and remove undoes it.
func TestNodeSetup(t *testing.T) {
	for _, tc := range []struct {
		name, main string // "" main: no file
		refused    string // "" when install must succeed
		imports    string // what the main file imports after
	}{
		{"no main file", "", "", `imports = ["DIR/conf.d/*.toml"]`},
		{"a main file without imports", "# site\nversion = 3 # pinned\n\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"x\"\n", "", `version = 3 # pinned` + "\n" + `imports = ["DIR/conf.d/*.toml"]`},
		{"a main file importing conf.d relatively", "version = 3\nimports = [\"conf.d/*.toml\"]\n", "", `imports = ["conf.d/*.toml"]`},
		{"a main file importing elsewhere", "version = 3\nimports = [\"/opt/x/*.toml\"]\n", "does not cover", `imports = ["/opt/x/*.toml"]`},
		{"a version 2 main file", "version = 2\n", "containerd config migrate", ""},
		{"no version", "[plugins.x]\nversion = 1\n", "version = 0", ""},
		{"a symlinked main file", "LINK", "symlink", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			main := filepath.Join(dir, "config.toml")
			switch tc.main {
			case "":
			case "LINK":
				if err := os.WriteFile(filepath.Join(dir, "real.toml"), []byte("version = 3\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("real.toml", main); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(main, []byte(tc.main), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			o, socket := runtimecheck.Options{RuntimeConfig: "containerd:" + main}, "/var/run/nri/nri.sock"
			err := Run(o, socket, "install", io.Discard)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("install: %v, want refused saying %q", err, tc.refused)
				}
				if _, err := os.Stat(filepath.Join(dir, "conf.d", "vgpud.toml")); err == nil {
					t.Error("the drop-in was written although install was refused")
				}
			} else if err != nil {
				t.Fatalf("install: %v", err)
			}
			raw, _ := os.ReadFile(main)
			if want := strings.ReplaceAll(tc.imports, "DIR", dir); !strings.Contains(string(raw), want) {
				t.Errorf("main file:\n%s\nwant it to contain %s", raw, want)
			}
			if tc.refused != "" {
				return
			}
			if fi, err := os.Stat(main); err == nil && tc.main != "" && fi.Mode().Perm() != 0o600 {
				t.Errorf("main file's mode %v, want its own 0600 kept", fi.Mode().Perm())
			}
			spec, _ := preflight.ParseSpec(o.RuntimeConfig)
			if v := spec.Read(runtimecheck.Want(socket)); !v.Closed() {
				t.Fatalf("after install: %+v", v)
			}
			if err := Run(o, socket, "remove", io.Discard); err != nil {
				t.Fatal(err)
			}
			if v := spec.Read(runtimecheck.Want(socket)); v.Result != preflight.FailsOpen {
				t.Fatalf("after remove: %+v", v)
			}
		})
	}
}
