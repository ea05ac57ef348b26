package runtimecheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/node/internal/preflight"
)

// Command is `vgpud preflight`: it reads the runtime configuration o
// names, as the node role does every minute, prints the verdict and
// fails unless the runtime fails closed without vgpud. Run on a node (or
// in vgpud's pod there) before or after the node setup step. With the
// runtime's version (the node's containerRuntimeVersion), a runtime
// older than NRI's validator fails open, as the node role judges it.
func Command(o Options, nriSocket, runtimeVersion string, asJSON bool, stdout io.Writer) error {
	if _, err := preflight.ParseSpec(o.RuntimeConfig); err != nil {
		return cli.Exit("--"+FlagRuntimeConfig+": "+err.Error(), 2)
	}
	v, ok := Preflight(o, nriSocket)
	if !ok {
		return cli.Exit("--"+FlagRuntimeConfig+" is empty: name the runtime's configuration, e.g. containerd:/etc/containerd/config.toml", 2)
	}
	v = preflight.WithRuntimeVersion(v, runtimeVersion)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, preflight.Summary(v))
		for _, p := range v.Problems {
			fmt.Fprintln(stdout, "  -", p)
		}
		if v.CDI.Enabled {
			fmt.Fprintf(stdout, "CDI: the runtime injects CDI devices from %s (vgpud's --cdi=auto hands a GPU out as the NVIDIA spec's device there)\n", strings.Join(v.CDI.SpecDirs, ", "))
		} else if v.Result != preflight.Unknown {
			fmt.Fprintln(stdout, "CDI: the runtime injects no CDI devices (vgpud hands GPUs out by env)")
		}
	}
	if !v.Closed() {
		return cli.Exit("the runtime does not fail closed without vgpud: "+v.Result, 1)
	}
	return nil
}

// FlagRuntimeVersion is `vgpud preflight --runtime-version`.
const FlagRuntimeVersion = "runtime-version"

// CommandFlags are `vgpud preflight`'s own flags, beside the runtime's.
func CommandFlags() []cli.Flag {
	return []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON instead of text"},
		&cli.StringFlag{Name: FlagRuntimeVersion, Usage: "the runtime's version as the node reports it (kubectl get node NODE -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}', e.g. containerd://2.4.2): one older than NRI's validator (containerd 2.2, CRI-O 1.34) fails open whatever its files say; empty judges the files alone"}}
}
