package preflight

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var want = Want{Plugin: "vgpud", Tolerate: "vgpud.io/runtime-hook-optional", Socket: "/var/run/nri/nri.sock"}

// write puts files (relative name → content) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil { // the directory alone
				t.Fatal(err)
			}
			continue
		}
		if target, ok := strings.CutPrefix(body, "LINK:"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if body == "FIFO" {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// shipped is vgpud's containerd drop-in as the repository ships it.
func shipped(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../manifests/node-setup/containerd-vgpud.toml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// judged fails t unless v has result and, for problem "", no problems,
// else one that says problem.
func judged(t *testing.T, v Verdict, result, problem string) {
	t.Helper()
	if v.Result != result {
		t.Fatalf("result %s, want %s: %+v", v.Result, result, v)
	}
	if problem == "" && len(v.Problems) > 0 {
		t.Fatalf("problems %q, want none", v.Problems)
	}
	if problem != "" && !strings.Contains(strings.Join(v.Problems, "\n"), problem) {
		t.Fatalf("problems %q do not say %q", v.Problems, problem)
	}
	if v.Closed() != (result == FailsClosed) {
		t.Fatalf("Closed() %v for %s", v.Closed(), v.Result)
	}
	if (v.Scope != "") != (v.Result == FailsClosed) {
		t.Fatalf("scope %q for %s", v.Scope, v.Result)
	}
}

// The shipped drop-ins fail closed for the pods admission marks; with
// vgpud required for every container, for all.
func TestScope(t *testing.T) {
	for _, tc := range []struct {
		name, extra, want string
	}{{"shipped", "", ScopeGPUPods}, {"vgpud required for all", "    required_plugins = [\"vgpud\"]\n", ScopeAll}} {
		dir := t.TempDir()
		write(t, dir, map[string]string{
			"config.toml":       "version = 3\nimports = [\"" + dir + "/conf.d/*.toml\"]\n",
			"conf.d/vgpud.toml": strings.Replace(shipped(t), "enable = true\n", "enable = true\n"+tc.extra, 1),
		})
		v := Containerd(filepath.Join(dir, "config.toml"), want)
		judged(t, v, FailsClosed, "")
		if v.Scope != tc.want {
			t.Errorf("%s: scope %q, want %q", tc.name, v.Scope, tc.want)
		}
		if s := Summary(v); !strings.Contains(s, map[string]string{ScopeGPUPods: "other pods start", ScopeAll: "creates no container vgpud's hook did not see"}[tc.want]) {
			t.Errorf("%s: summary %q", tc.name, s)
		}
	}
}

func TestContainerd(t *testing.T) {
	dropIn := shipped(t)
	main := func(dir string) string {
		return "version = 3\nimports = [\"" + dir + "/conf.d/*.toml\"]\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"registry.k8s.io/pause:3.10\"\n"
	}
	for _, tc := range []struct {
		name    string
		files   func(dir string) map[string]string
		result  string
		problem string // a word every verdict of this case says, "" for none
	}{
		{"the shipped drop-in, imported", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": dropIn}
		}, FailsClosed, ""},
		{"the drop-in removed", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/": ""}
		}, FailsOpen, "validator is off"},
		{"imported but not imported", func(d string) map[string]string {
			return map[string]string{"config.toml": "version = 3\n", "conf.d/vgpud.toml": dropIn}
		}, FailsOpen, "validator is off"},
		// containerd merges an import's plugin tables key by key: a later
		// import that sets NRI's socket keeps the validator, one that
		// turns the validator off wins.
		{"a later import sets NRI's socket", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": dropIn,
				"conf.d/zz-site.toml": "version = 3\n[plugins.\"io.containerd.nri.v1.nri\"]\n  socket_path = \"/var/run/nri/nri.sock\"\n"}
		}, FailsClosed, ""},
		{"a later import turns the validator off", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": dropIn,
				"conf.d/zz-site.toml": "version = 3\n[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n"}
		}, FailsOpen, "validator is off"},
		// containerd refuses to start on this, and says so.
		{"a version 2 main file", func(d string) map[string]string {
			return map[string]string{"config.toml": "version = 2\nimports = [\"" + d + "/conf.d/*.toml\"]\n", "conf.d/vgpud.toml": dropIn}
		}, Unknown, "higher than root config version 2"},
		{"NRI disabled as a plugin", func(d string) map[string]string {
			return map[string]string{"config.toml": "disabled_plugins = [\"io.containerd.nri.v1.nri\"]\n" + main(d), "conf.d/vgpud.toml": dropIn}
		}, FailsOpen, "NRI is off"},
		// Another plugin required for every container: vgpud still for
		// the pods admission marks.
		{"another plugin required", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": strings.Replace(dropIn, "enable = true\n", "enable = true\n    required_plugins = [\"other\"]\n", 1)}
		}, FailsClosed, ""},
		{"another toleration annotation", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": strings.Replace(dropIn, `= "vgpud.io/runtime-hook-optional"`, `= "example.com/optional"`, 1)}
		}, FailsOpen, "does not keep tenants"},
		{"no toleration annotation", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": strings.Replace(dropIn, `tolerate_missing_plugins_annotation = "vgpud.io/runtime-hook-optional"`, "", 1)}
		}, FailsClosed, ""},
		// The stricter mode: vgpud required for every container.
		{"no toleration annotation, vgpud required for all", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": strings.Replace(strings.Replace(dropIn, `tolerate_missing_plugins_annotation = "vgpud.io/runtime-hook-optional"`, "", 1), "enable = true\n", "enable = true\n    required_plugins = [\"vgpud\"]\n", 1)}
		}, FailsClosed, "lets no pod start"},
		// An import this process cannot see could turn NRI off.
		{"an import outside what is mounted", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d) + "", "conf.d/vgpud.toml": "version = 3\nimports = [\"" + d + "/not-mounted/*.toml\"]\n" + dropIn[strings.Index(dropIn, "[plugins"):]}
		}, Unknown, "cannot see"},
		{"a FIFO in conf.d", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": dropIn, "conf.d/zz.toml": "FIFO"}
		}, Unknown, "not a regular file"},
		{"another socket", func(d string) map[string]string {
			return map[string]string{"config.toml": main(d), "conf.d/vgpud.toml": strings.Replace(dropIn, `= "/var/run/nri/nri.sock"`, `= "/run/other.sock"`, 1)}
		}, FailsClosed, "--nri-socket"},
		{"no file", func(string) map[string]string { return nil }, Unknown, "mount"},
		{"not TOML", func(string) map[string]string { return map[string]string{"config.toml": "version = [\n"} }, Unknown, "fix the file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, tc.files(dir))
			judged(t, Containerd(filepath.Join(dir, "config.toml"), want), tc.result, tc.problem)
		})
	}
}

func TestContainerdListsTheFilesItMerged(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"config.toml":       "version = 3\nimports = [\"conf.d/*.toml\"]\n",
		"conf.d/vgpud.toml": shipped(t),
	})
	v := Containerd(filepath.Join(dir, "config.toml"), want)
	if v.Result != FailsClosed {
		t.Fatalf("a relative import: %+v", v)
	}
	files := []string{filepath.Join(dir, "config.toml"), filepath.Join(dir, "conf.d/vgpud.toml")}
	if !slices.Equal(v.Files, files) {
		t.Fatalf("files %q, want %q", v.Files, files)
	}
}

func TestCRIO(t *testing.T) {
	dropIn, err := os.ReadFile("../../../manifests/node-setup/crio-vgpud.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		result  string
		problem string
	}{
		{"the shipped drop-in", map[string]string{"crio.conf": "[crio]\n", "crio.conf.d/90-vgpud.conf": string(dropIn)}, FailsClosed, ""},
		{"the drop-in alone, no main file", map[string]string{"crio.conf.d/90-vgpud.conf": string(dropIn)}, FailsClosed, ""},
		{"defaults", map[string]string{"crio.conf": "[crio]\n"}, FailsOpen, "validator is off"},
		// Key by key: a later file that turns only NRI off wins, and one
		// that sets another socket keeps the validator.
		{"a later file turns NRI off", map[string]string{"crio.conf.d/90-vgpud.conf": string(dropIn),
			"crio.conf.d/99-site.conf": "[crio.nri]\nenable_nri = false\n"}, FailsOpen, "NRI is off"},
		{"a later file moves the socket", map[string]string{"crio.conf.d/90-vgpud.conf": string(dropIn),
			"crio.conf.d/99-site.conf": "[crio.nri]\nnri_listen = \"/run/x.sock\"\n"}, FailsClosed, "--nri-socket"},
		// A list is replaced whole, not appended to.
		{"a later file's required list", map[string]string{"crio.conf.d/90-vgpud.conf": string(dropIn),
			"crio.conf.d/99-site.conf": "[crio.nri.default_validator]\nnri_validator_required_plugins = [\"other\"]\n"}, FailsClosed, ""},
		{"an earlier file does not win", map[string]string{"crio.conf.d/10-site.conf": "[crio.nri]\nenable_nri = false\n",
			"crio.conf.d/90-vgpud.conf": string(dropIn)}, FailsClosed, ""},
		{"nothing there", nil, Unknown, "neither"},
		// CRI-O follows symlinks: so does the check.
		{"a symlinked drop-in turns NRI off", map[string]string{"crio.conf.d/90-vgpud.conf": string(dropIn),
			"site.conf": "[crio.nri]\nenable_nri = false\n", "crio.conf.d/99-site.conf": "LINK:../site.conf"}, FailsOpen, "NRI is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, tc.files)
			judged(t, CRIO(filepath.Join(dir, "crio.conf"), want), tc.result, tc.problem)
		})
	}
}

func TestParseSpec(t *testing.T) {
	for in, ok := range map[string]bool{
		"":                                       true,
		"containerd:/etc/containerd/config.toml": true,
		"cri-o:/etc/crio/crio.conf":              true,
		"/etc/containerd/config.toml":            false,
		"docker:/etc/docker/daemon.json":         false,
		"containerd:etc/containerd/config.toml":  false,
	} {
		if _, err := ParseSpec(in); (err == nil) != ok {
			t.Errorf("ParseSpec(%q): %v", in, err)
		}
	}
}

// Files that fail closed count once the runtime has made its NRI socket
// after them.
func TestCheckWantsTheRuntimeRestartedAfterTheFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"config.toml": "version = 3\nimports = [\"conf.d/*.toml\"]\n", "conf.d/vgpud.toml": shipped(t)})
	spec := Spec{Runtime: RuntimeContainerd, Path: filepath.Join(dir, "config.toml")}
	w := want
	w.Socket = filepath.Join(dir, "nri.sock")
	if v := spec.Check(w); v.Result != Unknown || !strings.Contains(strings.Join(v.Problems, ""), "no NRI socket") {
		t.Fatalf("no socket: %+v", v)
	}
	write(t, dir, map[string]string{"nri.sock": ""})
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(w.Socket, old, old); err != nil {
		t.Fatal(err)
	}
	if v := spec.Check(w); v.Result != Unknown || !strings.Contains(strings.Join(v.Problems, ""), "restart the runtime") {
		t.Fatalf("socket older than the files: %+v", v)
	}
	if err := os.Chtimes(w.Socket, time.Now().Add(time.Minute), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if v := spec.Check(w); v.Result != FailsClosed || strings.Contains(strings.Join(v.Problems, ""), "restart") {
		t.Fatalf("socket newer than the files: %+v", v)
	}
}

// A runtime older than NRI's validator fails open whatever its files say.
func TestRuntimeVersion(t *testing.T) {
	closed := Verdict{Result: FailsClosed, Scope: ScopeGPUPods}
	for version, want := range map[string]string{
		"containerd://2.4.2": FailsClosed, "containerd://2.2.0": FailsClosed, "containerd://v2.1.4": FailsOpen, "containerd://1.7.27": FailsOpen,
		"cri-o://1.34.1": FailsClosed, "cri-o://1.33.5": FailsOpen, "docker://28.0.1": FailsClosed, "": FailsClosed,
	} {
		v := WithRuntimeVersion(closed, version)
		if v.Result != want || (want == FailsOpen && (v.Scope != "" || len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "no default validator"))) {
			t.Errorf("%q: %+v, want %s", version, v, want)
		}
	}
}

// CDI as each runtime merges it: containerd's default on, from CDI's two
// directories, unless its CRI runtime plugin says otherwise (a version 2
// file's keys migrated there); CRI-O's always on.
func TestCDI(t *testing.T) {
	dropIn := shipped(t)
	defaults := CDI{Enabled: true, SpecDirs: []string{"/etc/cdi", "/var/run/cdi"}}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  CDI
	}{
		{"containerd's defaults", map[string]string{"config.toml": "version = 3\n"}, defaults},
		{"turned off", map[string]string{"config.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  enable_cdi = false\n"}, CDI{}},
		{"other directories", map[string]string{"config.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  cdi_spec_dirs = [\"/opt/cdi\"]\n"}, CDI{Enabled: true, SpecDirs: []string{"/opt/cdi"}}},
		{"no directories", map[string]string{"config.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  cdi_spec_dirs = []\n"}, CDI{}},
		{"the CRI runtime disabled", map[string]string{"config.toml": "version = 3\ndisabled_plugins = [\"io.containerd.cri.v1.runtime\"]\n"}, CDI{}},
		{"a version 2 file's key", map[string]string{"config.toml": "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = false\n"}, CDI{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.files["conf.d/vgpud.toml"] = dropIn
			write(t, dir, tc.files)
			v := Containerd(filepath.Join(dir, "config.toml"), want)
			if v.CDI.Enabled != tc.want.Enabled || !slices.Equal(v.CDI.SpecDirs, tc.want.SpecDirs) {
				t.Errorf("CDI %+v, want %+v (verdict %+v)", v.CDI, tc.want, v)
			}
		})
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{"crio.conf": "[crio.runtime]\ncdi_spec_dirs = [\"/etc/cdi\"]\n", "crio.conf.d/10-x.conf": "[crio.runtime]\ncdi_spec_dirs = [\"/run/cdi\"]\n"})
	if v := CRIO(filepath.Join(dir, "crio.conf"), want); !v.CDI.Enabled || !slices.Equal(v.CDI.SpecDirs, []string{"/run/cdi"}) {
		t.Errorf("CRI-O: CDI %+v, want on from /run/cdi", v.CDI)
	}
	dir = t.TempDir()
	write(t, dir, map[string]string{"crio.conf": ""})
	if v := CRIO(filepath.Join(dir, "crio.conf"), want); !v.CDI.Enabled || !slices.Equal(v.CDI.SpecDirs, defaults.SpecDirs) {
		t.Errorf("CRI-O's defaults: CDI %+v", v.CDI)
	}
}
