package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node/internal/inspect"
)

// Snapshot is what `vgpud inspect --json` prints: the running daemon's view
// of its node. The end-to-end suites decode it.
type Snapshot = inspect.Snapshot

// Inspect prints the running daemon's view of this node, read from its
// inspect socket; with ready it prints nothing and fails unless the node
// role is serving and registered with kubelet (a readiness probe).
func Inspect(ctx context.Context, socket string, asJSON, ready bool, stdout io.Writer) error {
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

// InjectXID sends a fake XID, spec GPU:XID, to a mock GPU of the running
// daemon.
func InjectXID(ctx context.Context, socket, spec string, stdout io.Writer) error {
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
