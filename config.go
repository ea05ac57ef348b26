package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/node"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/setting"
	"github.com/vgpud/vgpud/webhook"
)

// Roles a replica can run. A DaemonSet replica runs both; one role alone is
// for benchmarks and debugging.
const (
	roleNode    = "node"
	roleCluster = "cluster"
)

// Bounds of --kube-api-qps.
const (
	minAPIQPS = 1
	maxAPIQPS = 100000
)

// config is every setting of `vgpud run`, filled from flags and env, and
// validated as a whole before anything starts. Settings more than one part
// reads (resource names, scheduler name, this pod's identity) live here,
// once; main hands each part the values it needs.
type config struct {
	LogLevel     string
	LogFormat    string
	Kubeconfig   string
	KubeAPIQPS   int // client-side rate limit towards kube-apiserver
	NodeName     string
	PodName      string
	PodNamespace string
	Roles        []string
	Resources    protocol.ResourceNames
	// SchedulerName is the kube-scheduler profile that calls the extender:
	// the webhook gives it to GPU pods.
	SchedulerName string
	MetricsListen string // /metrics on every replica; "" disables
	// MetricsSecure serves it over HTTPS to callers the apiserver says may
	// get it (TokenReview, SubjectAccessReview); off: plain HTTP to anyone.
	MetricsSecure bool
	Profiling     bool // /debug/pprof on MetricsListen
	// ShutdownGrace bounds how long the roles may take to stop after a
	// signal: the node role drains while the leader hands admission over,
	// both inside the pod's terminationGracePeriodSeconds (30 s).
	ShutdownGrace time.Duration

	Node    node.Config
	Cluster cluster.Config
	Webhook webhook.Config
}

func defaultConfig() config {
	return config{
		LogLevel:      "info",
		LogFormat:     "auto",
		Roles:         []string{roleNode, roleCluster},
		KubeAPIQPS:    1000,
		Resources:     protocol.DefaultResourceNames(),
		SchedulerName: "vgpud-scheduler",
		MetricsListen: ":9090",
		MetricsSecure: true,
		ShutdownGrace: 20 * time.Second,
		Node:          node.DefaultConfig(),
		Cluster:       cluster.DefaultConfig(),
		Webhook:       webhook.DefaultConfig(),
	}
}

func (c config) runs(role string) bool { return slices.Contains(c.Roles, role) }

// leaseNamespace is the Lease's namespace: the flag, else this pod's.
func (c config) leaseNamespace() string {
	if c.Cluster.LeaseNamespace != "" {
		return c.Cluster.LeaseNamespace
	}
	return c.PodNamespace
}

// validate reports every invalid setting, one per line.
func (c config) validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(validateLogging(c.LogLevel, c.LogFormat))
	if len(c.Roles) == 0 {
		add(setting.Invalid("roles", "", "want node, cluster or node,cluster"))
	}
	for _, r := range c.Roles {
		if r != roleNode && r != roleCluster {
			add(setting.Invalid("roles", strings.Join(c.Roles, ","), "want node, cluster or node,cluster"))
			break
		}
	}
	if c.NodeName == "" && c.runs(roleNode) {
		add(setting.Invalid("node-name", "", "the node role needs the node's name; set NODE_NAME from the downward API (spec.nodeName)"))
	}
	if c.PodName == "" && c.runs(roleCluster) {
		add(setting.Invalid("pod-name", "", "leader election needs this replica's pod name; set POD_NAME from the downward API (metadata.name)"))
	}
	if c.PodNamespace == "" && c.runs(roleCluster) {
		add(setting.Invalid("pod-namespace", "", "set POD_NAMESPACE from the downward API (metadata.namespace)"))
	}
	add(validateResources(c.Resources))
	if c.ShutdownGrace < time.Second {
		add(setting.Invalid("shutdown-grace", c.ShutdownGrace, "want at least 1s, and less than the pod's terminationGracePeriodSeconds"))
	}
	if c.KubeAPIQPS < minAPIQPS || c.KubeAPIQPS > maxAPIQPS {
		add(setting.Invalid("kube-api-qps", c.KubeAPIQPS, fmt.Sprintf("want %d..%d requests per second", minAPIQPS, maxAPIQPS)))
	}
	if c.runs(roleNode) {
		add(c.Node.Validate())
	}
	if c.runs(roleCluster) {
		if c.SchedulerName == "" || len(validation.IsDNS1123Subdomain(c.SchedulerName)) > 0 {
			add(setting.Invalid("scheduler-name", c.SchedulerName, "want the scheduler profile name, e.g. vgpud-scheduler"))
		}
		add(c.Cluster.Validate())
		add(c.Webhook.Validate())
	}
	return errors.Join(errs...)
}

// resourceFlags name the --resource-* flags in the order of ResourceNames.All.
func resourceFlags() []string {
	return []string{"resource-gpu", "resource-gpumem", "resource-gpumem-percentage", "resource-gpucores", "resource-priority"}
}

// validateResources checks the extended-resource names: each a qualified
// name with a domain, as kubelet requires, and no two alike.
func validateResources(r protocol.ResourceNames) error {
	var errs []error
	flags := resourceFlags()
	seen := map[string]string{}
	for i, name := range r.All() {
		if msgs := validation.IsQualifiedName(name); len(msgs) > 0 || !strings.Contains(name, "/") {
			errs = append(errs, setting.Invalid(flags[i], name, "want a domain-prefixed resource name such as nvidia.com/gpu"))
			continue
		}
		if other, dup := seen[name]; dup {
			errs = append(errs, setting.Invalid(flags[i], name, "already used by --"+other))
		}
		seen[name] = flags[i]
	}
	return errors.Join(errs...)
}
