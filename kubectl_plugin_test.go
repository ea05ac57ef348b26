package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// Run as kubectl-vgpud, vgpud is the cluster view with kubectl's
// arguments: a kubeconfig that does not exist is that command's error.
func TestKubectlPlugin(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--kubeconfig", missing, "-o", "json"}, 2, "kubeconfig:"},
		{[]string{"--kubeconfig", missing, "--context", "prod", "-n", "ai", "--node", "gpu-1"}, 2, missing},
		{[]string{"-o", "table"}, 2, `-o "table": want wide, json or yaml`},
		{[]string{"pods"}, 2, "takes no arguments"},
	} {
		var out, errOut bytes.Buffer
		code := runMain(append([]string{"/usr/local/bin/kubectl-vgpud"}, tc.args...), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("kubectl vgpud %v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := runMain([]string{"kubectl-vgpud", "--help"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "kubectl vgpud [-n NAMESPACE]") || strings.Contains(out.String(), "vgpud inspect") {
		t.Errorf("kubectl vgpud --help: exit %d, it says\n%s", code, out.String())
	}
}

// The cluster view's flags are refused without --cluster: the node's
// own view has no namespace or node to narrow.
func TestInspectRefusesViewFlagsWithoutCluster(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runMain([]string{"vgpud", "inspect", "--node", "gpu-1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--node is for the cluster view") {
		t.Fatalf("vgpud inspect --node: exit %d, stderr %q", code, errOut.String())
	}
}

// A backtick in a flag's usage names its value in --help and is taken out
// of the text: a flag name quoted that way vanished from `vgpud run
// --help`.
func TestRunFlagUsageHasNoBackticks(t *testing.T) {
	cfg := defaultConfig()
	for _, g := range flagGroups(&cfg) {
		for _, f := range g.flags {
			if u, ok := f.(cli.DocGenerationFlag); ok && strings.Contains(u.GetUsage(), "`") {
				t.Errorf("--%s: usage %q has a backtick", f.Names()[0], u.GetUsage())
			}
		}
	}
}
