package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A layer built twice is the same image; pushed to a registry over TLS
// it is found again by tag, and pin names it by that tag and its digest.
func TestBuildPushPin(t *testing.T) {
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer.tar")
	writeLayer(t, layer, map[string]string{"usr/bin/hello": "#!/bin/sh\necho hello\n"})

	var first, second bytes.Buffer
	for i, w := range []*bytes.Buffer{&first, &second} {
		s := buildSpec{layer: layer, name: "example.com/hello:1", out: filepath.Join(dir, []string{"hello.tar", "again.tar"}[i]), platform: "linux/amd64",
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
	if err := pinManifest(ctx, host+"/team/hello:1", ca, "", strings.NewReader(manifest), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "image: "+want+"\n") || !strings.Contains(out.String(), "image: ghcr.io/vgpud/vgpud-other:1\n") {
		t.Fatalf("pinned manifest:\n%s\nwant image %s", out.String(), want)
	}
	if err := pinManifest(ctx, host+"/team/absent:1", ca, "", strings.NewReader(manifest), &out); err == nil || !strings.Contains(err.Error(), "push it first") {
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

// Two single-platform images make one index: pushed, the registry serves
// each platform's image under the one tag, and pin names the index.
func TestIndexOfTwoPlatforms(t *testing.T) {
	dir := t.TempDir()
	var tars []string
	for _, arch := range []string{"amd64", "arm64"} {
		layer := filepath.Join(dir, arch+".layer.tar")
		writeLayer(t, layer, map[string]string{"usr/bin/hello": "built for " + arch})
		out := filepath.Join(dir, arch+".tar")
		if err := build(buildSpec{layer: layer, name: "example.com/hello:" + arch, out: out, platform: "linux/" + arch,
			argv: []string{"/usr/bin/hello"}, entrypoint: true}, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		tars = append(tars, out)
	}
	if err := index("example.com/hello:1", filepath.Join(dir, "dup.tar"), []string{tars[0], tars[0]}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "one image per platform") {
		t.Fatalf("an index of one platform twice: %v", err)
	}
	var printed bytes.Buffer
	out := filepath.Join(dir, "index.tar")
	if err := index("example.com/hello:1", out, tars, &printed); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadLayoutImage(out); err == nil {
		t.Fatal("an index read as one image")
	}

	srv := httptest.NewTLSServer(registry.New())
	defer srv.Close()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(srv.URL, "https://") + "/team/hello:1"
	var pushed bytes.Buffer
	if err := push(context.Background(), out, ref, ca, &pushed); err != nil {
		t.Fatal(err)
	}
	digest := strings.Fields(printed.String())[1]
	if got := strings.TrimSpace(pushed.String()); got != ref+"@"+digest {
		t.Fatalf("push printed %q, want %s@%s", got, ref, digest)
	}
	opts, err := remoteOptions(context.Background(), ca)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag, opts...)
	if err != nil {
		t.Fatalf("the registry serves no index under %s: %v", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range m.Manifests {
		plats = append(plats, d.Platform.String())
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm64" {
		t.Fatalf("index platforms %v", plats)
	}
	pinned, err := resolve(context.Background(), ref, ca)
	if err != nil || pinned != ref+"@"+digest {
		t.Fatalf("pin resolves %s to %q (%v), want the index's digest", ref, pinned, err)
	}
}

// The layout's tarball holds nothing of the files' times: the same files
// written at another time give the same bytes.
func TestTarIgnoresFileTimes(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "blobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "blobs", "a"), []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	var tars [2][]byte
	for i, at := range []time.Time{time.Unix(1e9, 0), time.Unix(2e9, 0)} {
		for _, p := range []string{filepath.Join(tree, "blobs", "a"), filepath.Join(tree, "blobs"), tree} {
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, fmt.Sprintf("%d.tar", i))
		if err := tarDir(tree, out); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		tars[i] = raw
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Error("two tarballs of the same files, with other times, differ")
	}
}
