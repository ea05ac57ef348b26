package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// Run as kubectl-vgpud, vgpud is `inspect --cluster` with kubectl's
// arguments: a kubeconfig that does not exist is that command's error.
func TestKubectlPlugin(t *testing.T) {
	var out, errOut bytes.Buffer
	missing := filepath.Join(t.TempDir(), "absent")
	code := runMain([]string{"/usr/local/bin/kubectl-vgpud", "--kubeconfig", missing, "--json"}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "kubeconfig:") || !strings.Contains(errOut.String(), missing) {
		t.Fatalf("kubectl-vgpud with a missing kubeconfig: exit %d, stderr %q", code, errOut.String())
	}
	if got := asKubectlPlugin([]string{"vgpud", "inspect"}); strings.Join(got, " ") != "vgpud inspect" {
		t.Fatalf("vgpud's own name changed its arguments: %q", got)
	}
}
