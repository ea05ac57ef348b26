package main

import (
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildSpec is one image: a single layer and the config that runs it.
type buildSpec struct {
	layer, name, out, platform string
	argv                       []string
	entrypoint                 bool
	env                        []string
}

// build writes the image as an OCI layout tarball, which both `ctr images
// import` and push read, and prints its digest and pushed size. The
// same layer gives the same digest: no timestamps enter the image.
func build(s buildSpec, w io.Writer) error {
	img, err := image(s)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "vgpud-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"io.containerd.image.name": s.name})); err != nil {
		return fmt.Errorf("write %s to the OCI layout: %w", s.name, err)
	}
	if err := tarDir(dir, s.out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	size, err := pushedSize(img)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s %s %d\n", s.name, d, size)
	return err
}

// image is s's layer (gzip-compressed, as registries serve layers) under
// an OCI manifest and a config for s.platform.
func image(s buildSpec) (v1.Image, error) {
	plat, err := v1.ParsePlatform(s.platform)
	if err != nil {
		return nil, fmt.Errorf("--platform %q: %w", s.platform, err)
	}
	if len(s.argv) == 0 {
		return nil, fmt.Errorf("image %s: no entrypoint or command given; name the program to run after the flags", s.name)
	}
	layer, err := tarball.LayerFromFile(s.layer, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", s.layer, err)
	}
	base := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", s.layer, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, s.env...)
	if s.entrypoint {
		cf.Config.Entrypoint = s.argv
	} else {
		cf.Config.Cmd = s.argv
	}
	return mutate.ConfigFile(img, cf)
}

// pushedSize is what a registry stores and a node pulls: manifest,
// config and compressed layers.
func pushedSize(img v1.Image) (int64, error) {
	m, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	mf, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	total := int64(len(m)) + mf.Config.Size
	for _, l := range mf.Layers {
		total += l.Size
	}
	return total, nil
}
