package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

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

// runInjectXID sends a fake XID to a mock GPU of the running daemon.
func runInjectXID(ctx context.Context, socket, spec string, stdout io.Writer) error {
	i := strings.LastIndexByte(spec, ':')
	xid, err := strconv.ParseUint(spec[i+1:], 10, 64)
	if i <= 0 || err != nil {
		return cli.Exit(fmt.Sprintf("--inject-xid=%s is invalid: want GPU:XID, e.g. 3:79", spec), 2)
	}
	if err := inspect.InjectXID(ctx, socket, spec[:i], xid); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(stdout, "XID %d delivered to GPU %s\n", xid, spec[:i])
	return nil
}
