package leader

import (
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagLeaseName          = "lease-name"
	FlagLeaseNamespace     = "lease-namespace"
	FlagLeaseDuration      = "lease-duration"
	FlagLeaseRenewDeadline = "lease-renew-deadline"
	FlagLeaseRetryPeriod   = "lease-retry-period"
	FlagLeaderNodesFile    = "leader-nodes-file"
)

// MaxLeaseDuration is the longest hold the vgpud-lease policy lets a
// replica write: past it, followers wait long after a leader's node is
// gone.
const MaxLeaseDuration = time.Minute

// Options are the election's settings.
type Options struct {
	LeaseName string
	// LeaseNamespace holds the Lease; "" means this pod's namespace, which
	// is where the manifest's Role lets vgpud reach Leases.
	LeaseNamespace     string
	LeaseDuration      time.Duration
	LeaseRenewDeadline time.Duration
	LeaseRetryPeriod   time.Duration
	// LeaderNodesFile names the nodes whose replicas may lead, separated
	// by commas; no file, or one with no name, lets any node. The
	// manifest points it at the vgpud ConfigMap's leader-nodes key, which
	// the apiserver's vgpud-lease policy reads too: a replica elsewhere
	// neither campaigns nor could write the Lease.
	LeaderNodesFile string
}

// DefaultOptions hold the Lease 4 s, so that a new leader takes over
// within about five.
func DefaultOptions() Options {
	return Options{LeaseName: "vgpud-leader", LeaseDuration: 4 * time.Second, LeaseRenewDeadline: 3 * time.Second, LeaseRetryPeriod: 500 * time.Millisecond}
}

// Namespace is the Lease's namespace: the setting, else this pod's.
func (o Options) Namespace(podNamespace string) string {
	if o.LeaseNamespace != "" {
		return o.LeaseNamespace
	}
	return podNamespace
}

// Config is the elector's for the replica pod (in podNamespace, on node).
func (o Options) Config(pod, podNamespace, node string) Config {
	return Config{
		LeaseName:      o.LeaseName,
		LeaseNamespace: o.Namespace(podNamespace),
		Identity:       pod,
		PodNamespace:   podNamespace,
		LeaseDuration:  o.LeaseDuration,
		RenewDeadline:  o.LeaseRenewDeadline,
		RetryPeriod:    o.LeaseRetryPeriod,
		MayLead:        func() error { return MayLead(o.LeaderNodesFile, node) },
	}
}

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagLeaseName, Usage: "Lease that elects the leader", Value: o.LeaseName, Destination: &o.LeaseName},
		&cli.StringFlag{Name: FlagLeaseNamespace, Usage: "namespace of the Lease; empty means this pod's namespace", Value: o.LeaseNamespace, Destination: &o.LeaseNamespace},
		&cli.DurationFlag{Name: FlagLeaseDuration, Usage: "how long followers wait before taking a silent leader's lease", Value: o.LeaseDuration, Destination: &o.LeaseDuration},
		&cli.DurationFlag{Name: FlagLeaseRenewDeadline, Usage: "how long the leader retries renewing before it steps down", Value: o.LeaseRenewDeadline, Destination: &o.LeaseRenewDeadline},
		&cli.DurationFlag{Name: FlagLeaseRetryPeriod, Usage: "wait between election attempts", Value: o.LeaseRetryPeriod, Destination: &o.LeaseRetryPeriod},
		&cli.StringFlag{Name: FlagLeaderNodesFile, Usage: "file naming, comma-separated, the nodes whose replicas may lead; no file or no name: any node", Value: o.LeaderNodesFile, Destination: &o.LeaderNodesFile},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	add := func(flag string, v any, want string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), v, want))
	}
	if o.LeaseName == "" {
		add(FlagLeaseName, "", "want a Lease name such as vgpud-leader")
	}
	if o.LeaseDuration < time.Second || o.LeaseDuration%time.Second != 0 {
		// The Lease object stores its duration in whole seconds; 0 would
		// make every follower see the lease as expired at once.
		add(FlagLeaseDuration, o.LeaseDuration, "want whole seconds, at least 1s")
	}
	if o.LeaseDuration > MaxLeaseDuration {
		add(FlagLeaseDuration, o.LeaseDuration, "want at most "+MaxLeaseDuration.String()+": the vgpud-lease admission policy refuses a longer hold")
	}
	if o.LeaseDuration <= o.LeaseRenewDeadline {
		add(FlagLeaseDuration, o.LeaseDuration, "must be longer than --"+FlagLeaseRenewDeadline+" ("+o.LeaseRenewDeadline.String()+")")
	}
	if o.LeaseRetryPeriod <= 0 || o.LeaseRenewDeadline <= o.LeaseRetryPeriod {
		add(FlagLeaseRenewDeadline, o.LeaseRenewDeadline, "must be longer than --"+FlagLeaseRetryPeriod+" ("+o.LeaseRetryPeriod.String()+"), which must be positive")
	}
	return errs
}
