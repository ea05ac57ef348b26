// Command image builds, pushes and pins vgpud's container images without
// Docker: the one recipe behind `make image`, `make push`, `make
// manifests` and the test cluster's images (scripts/images.sh).
//
//	image build --layer L.tar --name REF --out O.tar (--entrypoint|--cmd) ARG...
//	image index --name REF --out O.tar --from A.tar --from B.tar...
//	image push --from O.tar --to REF [--ca FILE]
//	image pin --image REF [--ca FILE] < manifest > pinned
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "image",
		Usage: "build, push and pin vgpud's OCI images",
		Commands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "write a one-layer OCI image, as an OCI layout tarball, from a layer tarball",
				ArgsUsage: "ARG... (the entrypoint's or command's argv)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "layer", Required: true, Usage: "the root filesystem as an uncompressed tar"},
					&cli.StringFlag{Name: "name", Required: true, Usage: "the image's name, which `ctr images import` gives it"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "the OCI layout tarball to write"},
					&cli.StringFlag{Name: "platform", Value: "linux/amd64", Usage: "os/arch the layer was built for"},
					&cli.BoolFlag{Name: "entrypoint", Usage: "ARGs are the entrypoint (else the command)"},
					&cli.StringSliceFlag{Name: "env", Usage: "K=V added to the config's environment after PATH"},
				},
				Action: func(c *cli.Context) error {
					return build(buildSpec{
						layer: c.String("layer"), name: c.String("name"), out: c.String("out"), platform: c.String("platform"),
						argv: c.Args().Slice(), entrypoint: c.Bool("entrypoint"), env: c.StringSlice("env"),
					}, os.Stdout)
				},
			},
			{
				Name:  "index",
				Usage: "write one image index (a multi-platform image) of single-platform images, as an OCI layout tarball",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true, Usage: "the index's name"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "the OCI layout tarball to write"},
					&cli.StringSliceFlag{Name: "from", Required: true, Usage: "an OCI layout tarball of one image (image build's --out), one per platform"},
				},
				Action: func(c *cli.Context) error {
					return index(c.String("name"), c.String("out"), c.StringSlice("from"), os.Stdout)
				},
			},
			{
				Name:  "push",
				Usage: "push an OCI layout tarball's image; prints REF@DIGEST",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "from", Required: true, Usage: "the OCI layout tarball (image build's --out)"},
					&cli.StringFlag{Name: "to", Required: true, Usage: "registry/repository:tag"},
					&cli.StringFlag{Name: "ca", Usage: "a PEM CA the registry's certificate chains to, beside the system's"},
				},
				Action: func(c *cli.Context) error {
					return push(c.Context, c.String("from"), c.String("to"), c.String("ca"), os.Stdout)
				},
			},
			{
				Name:  "pin",
				Usage: "copy a manifest from stdin to stdout with vgpud's image replaced by REF pinned to its digest in the registry",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "image", Required: true, Usage: "registry/repository:tag, or with @sha256:... already"},
					&cli.StringFlag{Name: "ca", Usage: "a PEM CA the registry's certificate chains to, beside the system's"},
					&cli.StringFlag{Name: "kubernetes", Usage: "the cluster's version (v1.35.2): below v1.36 the manifest leaves out the MutatingAdmissionPolicy, and kube-scheduler is that version's"},
				},
				Action: func(c *cli.Context) error {
					return pinManifest(c.Context, c.String("image"), c.String("ca"), c.String("kubernetes"), os.Stdin, os.Stdout)
				},
			},
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
