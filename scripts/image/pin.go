package main

import (
	"context"
	"fmt"
	"io"
	"regexp"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vgpud/vgpud/manifests"
)

// released is the image manifests/vgpud.yaml names, at its release's tag,
// until pinned to what was pushed.
var released = regexp.MustCompile(`(?m)^(\s*image: )ghcr\.io/vgpud/vgpud:[^\s@]+(@sha256:[0-9a-f]+)?$`)

// pinManifest copies the manifest on in to out with vgpud's image
// replaced by image pinned to the digest the registry holds for it and,
// where kubernetes is set, made for a cluster of that version.
func pinManifest(ctx context.Context, image, ca, kubernetes string, in io.Reader, out io.Writer) error {
	raw, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	manifest := string(raw)
	if kubernetes != "" {
		if manifest, err = manifests.ForKubernetes(manifest, kubernetes); err != nil {
			return fmt.Errorf("--kubernetes: %w", err)
		}
	}
	ref, err := resolve(ctx, image, ca)
	if err != nil {
		return err
	}
	pinned, err := pin(manifest, ref)
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, pinned)
	return err
}

// resolve names image by tag and digest: the digest as given, or as the
// registry answers for the tag, so that what runs is what was pushed.
func resolve(ctx context.Context, image, ca string) (string, error) {
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("--image %q: %w; give registry/repository:tag", image, err)
	}
	if _, ok := ref.(name.Digest); ok {
		return image, nil
	}
	opts, err := remoteOptions(ctx, ca)
	if err != nil {
		return "", err
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("look up %s in its registry (push it first: make push IMAGE=%s): %w", ref, ref, err)
	}
	return ref.Name() + "@" + desc.Digest.String(), nil
}

// pin replaces every use of vgpud's released image in manifest with ref.
func pin(manifest, ref string) (string, error) {
	if !released.MatchString(manifest) {
		return "", fmt.Errorf("no image: ghcr.io/vgpud/vgpud:<tag> in the manifest on stdin; pin reads manifests/vgpud.yaml or an overlay of it")
	}
	return released.ReplaceAllStringFunc(manifest, func(line string) string {
		return released.FindStringSubmatch(line)[1] + ref
	}), nil
}
