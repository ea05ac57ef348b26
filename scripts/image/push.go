package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push sends the image or image index in the OCI layout tarball from to
// the registry as to (a tag), with the credentials docker login or a
// registry helper left, and prints to pinned by digest.
func push(ctx context.Context, from, to, ca string, w io.Writer) error {
	tag, err := name.NewTag(to, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--to %q: %w; give registry/repository:tag", to, err)
	}
	what, cleanup, err := loadLayout(from)
	if err != nil {
		return err
	}
	defer cleanup()
	opts, err := remoteOptions(ctx, ca)
	if err != nil {
		return err
	}
	var d v1.Hash
	switch x := what.(type) {
	case v1.ImageIndex:
		if err := remote.WriteIndex(tag, x, opts...); err != nil {
			return fmt.Errorf("push %s: %w", tag, err)
		}
		d, err = x.Digest()
	case v1.Image:
		if err := remote.Write(tag, x, opts...); err != nil {
			return fmt.Errorf("push %s: %w", tag, err)
		}
		d, err = x.Digest()
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s@%s\n", tag.Name(), d)
	return err
}

// loadLayout reads the one image or image index in an OCI layout
// tarball, unpacked to a directory that cleanup removes: its blobs are
// read lazily, while it is pushed.
func loadLayout(path string) (what any, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "vgpud-image-")
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if err := untar(path, dir); err != nil {
		return nil, nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s is not an OCI layout tarball (image build writes one): %w", path, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, nil, fmt.Errorf("%s holds %d entries; push takes one image or one index", path, len(m.Manifests))
	}
	if m.Manifests[0].MediaType.IsIndex() {
		what, err = idx.ImageIndex(m.Manifests[0].Digest)
	} else {
		what, err = idx.Image(m.Manifests[0].Digest)
	}
	if err != nil {
		return nil, nil, err
	}
	return what, cleanup, nil
}

// loadLayoutImage is loadLayout of a tarball that holds one image.
func loadLayoutImage(path string) (v1.Image, func(), error) {
	what, cleanup, err := loadLayout(path)
	if err != nil {
		return nil, nil, err
	}
	img, ok := what.(v1.Image)
	if !ok {
		cleanup()
		return nil, nil, fmt.Errorf("%s holds an image index; give single-platform images", path)
	}
	return img, cleanup, nil
}

// remoteOptions are the registry client's: credentials from the local
// keychain, and ca trusted beside the system's roots.
func remoteOptions(ctx context.Context, ca string) ([]remote.Option, error) {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if ca == "" {
		return opts, nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca %s: no PEM certificate in it", ca)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.RootCAs = pool
	return append(opts, remote.WithTransport(tr)), nil
}
