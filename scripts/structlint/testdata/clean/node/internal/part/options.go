package part

import "github.com/urfave/cli/v2"

// Options are the part's settings.
type Options struct{ Size int }

// Flags are its flags.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{&cli.IntFlag{Name: "size", Destination: &o.Size}}
}
