package main

import (
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// index writes one image index (a multi-platform image) of the images in
// the OCI layout tarballs from, each under the platform its config names,
// as an OCI layout tarball that push reads; it prints the index's digest.
func index(name, out string, from []string, w io.Writer) error {
	if len(from) < 2 {
		return fmt.Errorf("index %s: give two images or more (--from), one per platform", name)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for _, path := range from {
		img, cleanup, err := loadLayoutImage(path)
		if err != nil {
			return err
		}
		defer cleanup()
		cf, err := img.ConfigFile()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		plat := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if other, dup := seen[plat.String()]; dup {
			return fmt.Errorf("%s and %s are both %s: an index holds one image per platform", other, path, plat.String())
		}
		seen[plat.String()] = path
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	dir, err := os.MkdirTemp("", "vgpud-index-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"io.containerd.image.name": name})); err != nil {
		return fmt.Errorf("write %s to the OCI layout: %w", name, err)
	}
	if err := tarDir(dir, out); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s %s %d platforms\n", name, d, len(from))
	return err
}
