package nodesetup

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Options are how the in-cluster node setup restarts the runtime and
// where it reports; with Node empty, `vgpud node-setup` is the by-hand
// step, which changes files only.
type Options struct {
	// Node, when set, runs the in-cluster setup for that node (the
	// DaemonSet passes spec.nodeName): it restarts the runtime by
	// Restart, holds the Lease in Namespace as Holder, and labels Node.
	Node      string
	Namespace string
	Holder    string
	// Lease names the node-setup Lease: the chart's name with
	// -node-setup (fullnameOverride renames it).
	Lease string
	// Restart is RestartSignal or RestartNone.
	Restart string
	// RuntimeSocket is the runtime's API socket, as mounted.
	RuntimeSocket string
	// RestartTimeout bounds the wait for the runtime to serve again.
	RestartTimeout time.Duration
	// LeaseWait bounds the wait for the node-setup Lease.
	LeaseWait time.Duration
	// WaitTimeout bounds wait-reverted.
	WaitTimeout time.Duration
}

// DefaultOptions restart containerd by signal.
func DefaultOptions() Options {
	return Options{Lease: wellknown.LeaseNodeSetup, Restart: RestartSignal, RuntimeSocket: "/run/containerd/containerd.sock", RestartTimeout: 2 * time.Minute, LeaseWait: 10 * time.Minute, WaitTimeout: 10 * time.Minute}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "node", Usage: "run as the chart's node setup for this node (its spec.nodeName): restart the runtime where its files changed, one node at a time by the --lease Lease, and label the node vgpud.io/node-setup with the outcome; empty: change files only, as by hand on the host", Destination: &o.Node},
		&cli.StringFlag{Name: "namespace", Usage: "the namespace of the node-setup Lease (vgpud's)", EnvVars: []string{"POD_NAMESPACE"}, Destination: &o.Namespace},
		&cli.StringFlag{Name: "lease", Usage: "the node-setup Lease in --namespace, which one node at a time holds while it restarts its runtime (the chart's name with -node-setup)", Value: o.Lease, Destination: &o.Lease},
		&cli.StringFlag{Name: "holder", Usage: "who holds the node-setup Lease: this pod's name", EnvVars: []string{"POD_NAME"}, Destination: &o.Holder},
		&cli.StringFlag{Name: "restart", Usage: "how the node setup restarts the runtime once its files changed: signal (SIGTERM to the process serving --runtime-socket, for a runtime whose supervisor starts it again, as containerd's systemd unit does) or none (the node is labelled restart-needed)", Value: o.Restart, Destination: &o.Restart},
		&cli.StringFlag{Name: "runtime-socket", Usage: "the runtime's API socket, as mounted in the container, whose serving process --restart=signal stops", Value: o.RuntimeSocket, Destination: &o.RuntimeSocket},
		&cli.DurationFlag{Name: "restart-timeout", Usage: "how long the node setup waits for the runtime to serve again after the signal", Value: o.RestartTimeout, Destination: &o.RestartTimeout},
		&cli.DurationFlag{Name: "lease-wait", Usage: "how long the node setup waits for the --lease Lease, which one node at a time holds while it restarts its runtime, before it gives up naming the holder (and its pod starts it again)", Value: o.LeaseWait, Destination: &o.LeaseWait},
		&cli.DurationFlag{Name: "wait-timeout", Usage: "how long wait-reverted waits for every node to be reverted", Value: o.WaitTimeout, Destination: &o.WaitTimeout},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	if o.Restart != RestartSignal && o.Restart != RestartNone {
		errs = append(errs, field.NotSupported(field.NewPath("restart"), o.Restart, []string{RestartSignal, RestartNone}))
	}
	if o.Node != "" && (o.Namespace == "" || o.Holder == "" || o.Lease == "") {
		errs = append(errs, field.Required(field.NewPath("holder"), "with --node, --namespace, --lease and --holder (POD_NAMESPACE, POD_NAME) name the Lease and its holder"))
	}
	if msgs := validation.IsDNS1123Subdomain(o.Lease); o.Lease != "" && len(msgs) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("lease"), o.Lease, strings.Join(msgs, "; ")))
	}
	for name, d := range map[string]time.Duration{"restart-timeout": o.RestartTimeout, "lease-wait": o.LeaseWait, "wait-timeout": o.WaitTimeout} {
		if d <= 0 {
			errs = append(errs, field.Invalid(field.NewPath(name), d.String(), "must be positive"))
		}
	}
	return errs
}
