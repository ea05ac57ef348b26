package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node/inspect"
)

// runInspect prints the running daemon's view of this node.
func runInspect(ctx context.Context, socket string, asJSON, ready bool, stdout io.Writer) error {
	s, err := inspect.Fetch(ctx, socket)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	switch {
	case ready:
		if !s.Ready {
			return cli.Exit("not ready: "+s.NotReady, 1)
		}
		return nil
	case asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return inspect.Render(stdout, s)
}
