package cluster

import (
	"time"

	"github.com/vgpud/vgpud/cluster/internal/server/certs"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Config is the cluster role's own settings. What it shares with other
// parts (resource names, scheduler name, this pod's namespace) is passed
// to NewRole by main.
type Config struct {
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
	Listen          string // HTTPS: the webhook and the probes
	ExtenderListen  string // mutual TLS: the extender, for kube-scheduler only
	// TLS is the listener's certificate: the Secret it lives in, the
	// webhook whose caBundle trusts it, the Service it names. Its
	// Namespace is this pod's, filled by the Role.
	TLS certs.Config
	// SettingsFile is a YAML file of the scheduling defaults below
	// (nodePolicy, gpuPolicy, defaultGPUMemPercentage, defaultGPUCores)
	// that the leader reads each term and watches: the vgpud ConfigMap's
	// cluster-settings.yaml, so that changing a policy restarts nothing.
	// What it sets wins over the flags; "" or no file: the flags alone.
	SettingsFile string
	NodePolicy   string // podmodel.Binpack | podmodel.Spread
	GPUPolicy    string // a chain podmodel.ParseGPUPolicy reads, with a load key
	// DefaultGPUMemPercentage is the GPU memory share of a container that names
	// neither gpumem nor gpumem-percentage; 100 = the whole card.
	DefaultGPUMemPercentage int
	// DefaultGPUCores is the share of each GPU's cores, in percent, a
	// container that names no gpucores gets and is charged; 0 means a
	// slot's share of the GPU it lands on (its cores divided by its
	// split). HAMi leaves such a container unlimited and uncharged.
	DefaultGPUCores int
	// BindWait bounds how long a bind waits for the node's previous pod to
	// be allocated by kubelet before giving up (the scheduler retries).
	BindWait time.Duration
	// BindUnansweredHold is how long a Binding that got no answer may
	// still land, during which its pod's room stays held: kube-apiserver's
	// --request-timeout (1 minute by default), and a margin.
	BindUnansweredHold time.Duration
}

// Bounds of the settings that have them; the flags' checks and help text
// are built from these.
const (
	MaxBindWait = 5 * time.Minute
	// MaxLeaseDuration is the longest hold the vgpud-lease policy lets a
	// replica write: past it, followers wait long after a leader's node
	// is gone.
	MaxLeaseDuration = time.Minute
)

// DeletedInFlight is how long a pod deleted while in flight keeps its
// node's in-flight slot: long enough for kubelet to finish admitting it,
// since the node role's GetPreferredAllocation and Allocate each wait up
// to --allocate-wait, which is at most --bind-wait in a sound setup.
func (c Config) DeletedInFlight() time.Duration { return 2 * c.BindWait }

// leaseNamespace is the Lease's namespace: the setting, else this pod's.
func (c Config) leaseNamespace(podNamespace string) string {
	if c.LeaseNamespace != "" {
		return c.LeaseNamespace
	}
	return podNamespace
}

// DefaultConfig returns the settings vgpud runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		LeaseName:               "vgpud-leader",
		LeaseDuration:           4 * time.Second,
		LeaseRenewDeadline:      3 * time.Second,
		LeaseRetryPeriod:        500 * time.Millisecond,
		Listen:                  ":9443",
		ExtenderListen:          ":9444",
		TLS:                     certs.DefaultConfig(),
		NodePolicy:              podmodel.Binpack,
		GPUPolicy:               podmodel.Spread,
		DefaultGPUMemPercentage: 100,
		BindWait:                10 * time.Second,
		BindUnansweredHold:      70 * time.Second,
	}
}
