package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// Print prints the running daemon's view of this node, read from its
// inspect socket; with ready it prints nothing and fails unless the node
// role is serving and registered with kubelet (a readiness probe).
func Print(ctx context.Context, socket string, asJSON, ready bool, stdout io.Writer) error {
	s, err := Fetch(ctx, socket)
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
	return Render(stdout, s)
}

// injectXID sends a fake XID, spec GPU:XID, to a mock GPU of the running
// daemon.
func injectXID(ctx context.Context, socket, spec string, stdout io.Writer) error {
	i := strings.LastIndexByte(spec, ':')
	xid, err := strconv.ParseUint(spec[i+1:], 10, 64)
	if i <= 0 || err != nil {
		return cli.Exit(fmt.Sprintf("--inject-xid=%s is invalid: want GPU:XID, e.g. 3:79", spec), 2)
	}
	if err := InjectXID(ctx, socket, spec[:i], xid); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(stdout, "XID %d delivered to GPU %s\n", xid, spec[:i])
	return nil
}

// setMockPlugged takes a mock GPU (index or UUID) off the running
// daemon's machine, or puts it back.
func setMockPlugged(ctx context.Context, socket, gpu string, plugged bool, stdout io.Writer) error {
	if err := SetPlugged(ctx, socket, gpu, plugged); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	verb := "taken off"
	if plugged {
		verb = "put back on"
	}
	fmt.Fprintf(stdout, "GPU %s %s the mock machine; the node role sees it at its next rescan (--rescan-interval)\n", gpu, verb)
	return nil
}

// setMockProcess declares, on a mock GPU of the running daemon, that a
// process uses memory and SM time there: spec GPU:PID:MiB[:SM%] (MiB 0
// takes it off). The PID is a host PID: the node attributes it through
// /proc like any process the driver lists.
func setMockProcess(ctx context.Context, socket, spec string, stdout io.Writer) error {
	bad := cli.Exit(fmt.Sprintf("--mock-process=%s is invalid: want GPU:PID:MiB[:SM%%], e.g. 0:4242:2048:30", spec), 2)
	f := strings.Split(spec, ":")
	if len(f) != 3 && len(f) != 4 {
		return bad
	}
	pid, err1 := strconv.Atoi(f[1])
	used, err2 := strconv.ParseUint(f[2], 10, 64)
	sm := -1
	var err3 error
	if len(f) == 4 {
		sm, err3 = strconv.Atoi(f[3])
	}
	if err1 != nil || err2 != nil || err3 != nil {
		return bad
	}
	if err := SetProcess(ctx, socket, f[0], pid, used, sm); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(stdout, "process %d declared on GPU %s: %d MiB\n", pid, f[0], used)
	return nil
}

// CommandFlags are `vgpud inspect`'s own flags, beside the socket's.
func CommandFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
		&cli.BoolFlag{Name: "ready", Usage: "print nothing; exit 0 if the node role is serving and registered with kubelet, 1 if not (a readiness probe)"},
		&cli.StringFlag{Name: "inject-xid", Usage: "`GPU:XID` (GPU by index or UUID): deliver a fake XID event, to test health handling; mock and fake backends only"},
		&cli.StringFlag{Name: "mock-unplug", Usage: "`GPU` (index or UUID): take a GPU off the machine, as one fallen off the bus, to test GPUs that come and go; mock and fake backends only"},
		&cli.StringFlag{Name: "mock-plug", Usage: "`GPU` (index or UUID): put an unplugged GPU back; mock and fake backends only"},
		&cli.StringFlag{Name: "mock-process", Usage: "`GPU:PID:MiB[:SM%]` (GPU by index or UUID, or a MIG device by UUID; PID on the host): declare that a process uses the GPU, to test usage sampling and enforcement; MiB 0 takes it off; mock and fake backends only"},
	}
}

// Command is `vgpud inspect` on this node, as c's CommandFlags say,
// through the daemon's socket.
func Command(c *cli.Context, socket string, stdout io.Writer) error {
	if spec := c.String("inject-xid"); spec != "" {
		return injectXID(c.Context, socket, spec, stdout)
	}
	if gpu := c.String("mock-unplug"); gpu != "" {
		return setMockPlugged(c.Context, socket, gpu, false, stdout)
	}
	if gpu := c.String("mock-plug"); gpu != "" {
		return setMockPlugged(c.Context, socket, gpu, true, stdout)
	}
	if spec := c.String("mock-process"); spec != "" {
		return setMockProcess(c.Context, socket, spec, stdout)
	}
	return Print(c.Context, socket, c.Bool("json"), c.Bool("ready"), stdout)
}
