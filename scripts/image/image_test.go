package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// A layer built twice is the same image; pushed to a registry over TLS
// it is found again by tag, and pin names it by that tag and its digest.
func TestBuildPushPin(t *testing.T) {
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer.tar")
	writeLayer(t, layer, map[string]string{"usr/bin/hello": "#!/bin/sh\necho hello\n"})

	var first, second bytes.Buffer
	for _, w := range []*bytes.Buffer{&first, &second} {
		s := buildSpec{layer: layer, name: "example.com/hello:1", out: filepath.Join(dir, "hello.tar"), platform: "linux/amd64",
			argv: []string{"/usr/bin/hello"}, entrypoint: true, env: []string{"A=b"}}
		if err := build(s, w); err != nil {
			t.Fatal(err)
		}
	}
	if first.String() != second.String() {
		t.Fatalf("two builds of one layer differ: %q, %q", first.String(), second.String())
	}
	firstTar, err := os.ReadFile(filepath.Join(dir, "hello.tar"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // another second in the files' times
	if err := build(buildSpec{layer: layer, name: "example.com/hello:1", out: filepath.Join(dir, "again.tar"), platform: "linux/amd64",
		argv: []string{"/usr/bin/hello"}, entrypoint: true, env: []string{"A=b"}}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if again, err := os.ReadFile(filepath.Join(dir, "again.tar")); err != nil || !bytes.Equal(again, firstTar) {
		t.Fatalf("the OCI layout tarball differs between two builds (%v)", err)
	}
	fields := strings.Fields(first.String())
	if len(fields) != 3 || !strings.HasPrefix(fields[1], "sha256:") {
		t.Fatalf("build printed %q; want name, digest, size", first.String())
	}
	digest := fields[1]

	srv := httptest.NewTLSServer(registry.New())
	defer srv.Close()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "https://")
	ctx := context.Background()
	if err := push(ctx, filepath.Join(dir, "hello.tar"), host+"/team/hello:1", "", &bytes.Buffer{}); err == nil {
		t.Fatal("push trusted a registry whose CA it was not given")
	}
	var pushed bytes.Buffer
	if err := push(ctx, filepath.Join(dir, "hello.tar"), host+"/team/hello:1", ca, &pushed); err != nil {
		t.Fatal(err)
	}
	want := host + "/team/hello:1@" + digest
	if strings.TrimSpace(pushed.String()) != want {
		t.Fatalf("push printed %q, want %q", pushed.String(), want)
	}

	manifest := "containers:\n  - name: vgpud\n    image: ghcr.io/vgpud/vgpud:v0.2.0\n  - name: other\n    image: ghcr.io/vgpud/vgpud-other:1\n"
	var out bytes.Buffer
	if err := pinManifest(ctx, host+"/team/hello:1", ca, strings.NewReader(manifest), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "image: "+want+"\n") || !strings.Contains(out.String(), "image: ghcr.io/vgpud/vgpud-other:1\n") {
		t.Fatalf("pinned manifest:\n%s\nwant image %s", out.String(), want)
	}
	if err := pinManifest(ctx, host+"/team/absent:1", ca, strings.NewReader(manifest), &out); err == nil || !strings.Contains(err.Error(), "push it first") {
		t.Fatalf("pin of an image never pushed: %v", err)
	}
	if _, err := pin("image: other/image:1\n", want); err == nil {
		t.Fatal("pin of a manifest without vgpud's image succeeded")
	}
}

func TestBuildRefusesNoProgram(t *testing.T) {
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer.tar")
	writeLayer(t, layer, map[string]string{"a": "b"})
	err := build(buildSpec{layer: layer, name: "x/y:1", out: filepath.Join(dir, "o.tar"), platform: "linux/amd64"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no entrypoint or command") {
		t.Fatalf("build without argv: %v", err)
	}
}

func writeLayer(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
