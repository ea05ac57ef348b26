package inspect

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FlagInspectSocket is Options.InspectSocket's flag.
const FlagInspectSocket = "inspect-socket"

// Options say where the node serves `vgpud inspect`.
type Options struct {
	InspectSocket string // the unix socket `vgpud inspect` talks to
}

// DefaultOptions serve it in /run/vgpud.
func DefaultOptions() Options { return Options{InspectSocket: "/run/vgpud/inspect.sock"} }

// InspectSocketFlag is --inspect-socket, which `vgpud inspect` shares
// with the role.
func (o *Options) InspectSocketFlag() cli.Flag {
	return &cli.StringFlag{Name: FlagInspectSocket, Usage: "unix socket that vgpud inspect reads", Value: o.InspectSocket, Destination: &o.InspectSocket}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag { return []cli.Flag{o.InspectSocketFlag()} }

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	if o.InspectSocket == "" {
		return field.ErrorList{field.Invalid(field.NewPath(FlagInspectSocket), "", fmt.Sprintf("want a socket path such as %s", DefaultOptions().InspectSocket))}
	}
	return nil
}
