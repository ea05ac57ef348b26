package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/node"
	"github.com/vgpud/vgpud/protocol"
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

// validate reports every invalid setting, one per line, by its flag.
func (c config) validate() error {
	var errs field.ErrorList
	add := func(list ...*field.Error) { errs = append(errs, list...) }
	add(validateLogging(c.LogLevel, c.LogFormat)...)
	if len(c.Roles) == 0 {
		add(invalid(flagRoles, "", "want node, cluster or node,cluster"))
	}
	for _, r := range c.Roles {
		if r != roleNode && r != roleCluster {
			add(invalid(flagRoles, strings.Join(c.Roles, ","), "want node, cluster or node,cluster"))
			break
		}
	}
	if c.NodeName == "" && c.runs(roleNode) {
		add(invalid(flagNodeName, "", "the node role needs the node's name; set NODE_NAME from the downward API (spec.nodeName)"))
	}
	if c.PodName == "" && c.runs(roleCluster) {
		add(invalid(flagPodName, "", "leader election needs this replica's pod name; set POD_NAME from the downward API (metadata.name)"))
	}
	if c.PodNamespace == "" && c.runs(roleCluster) {
		add(invalid(flagPodNamespace, "", "set POD_NAMESPACE from the downward API (metadata.namespace)"))
	}
	add(validateResources(c.Resources)...)
	if c.ShutdownGrace < time.Second {
		add(invalid(flagShutdownGrace, c.ShutdownGrace, "want at least 1s, and less than the pod's terminationGracePeriodSeconds"))
	}
	if c.KubeAPIQPS < minAPIQPS || c.KubeAPIQPS > maxAPIQPS {
		add(invalid(flagKubeAPIQPS, c.KubeAPIQPS, fmt.Sprintf("want %d..%d requests per second", minAPIQPS, maxAPIQPS)))
	}
	if c.runs(roleNode) {
		add(c.Node.Validate()...)
	}
	if c.runs(roleCluster) {
		if c.SchedulerName == "" || len(validation.IsDNS1123Subdomain(c.SchedulerName)) > 0 {
			add(invalid(flagSchedulerName, c.SchedulerName, "want the scheduler profile name, e.g. vgpud-scheduler"))
		}
		add(c.Cluster.Validate()...)
		add(c.Webhook.Validate()...)
	}
	return flagErrors(errs)
}

// resourceFlags name the --resource-* flags in the order of ResourceNames.All.
func resourceFlags() []string {
	return []string{"resource-gpu", "resource-gpumem", "resource-gpumem-percentage", "resource-gpucores", "resource-priority"}
}

// validateResources checks the extended-resource names: each a qualified
// name with a domain, as kubelet requires, and no two alike.
func validateResources(r protocol.ResourceNames) field.ErrorList {
	var errs field.ErrorList
	flags := resourceFlags()
	seen := map[string]string{}
	for i, name := range r.All() {
		if msgs := validation.IsQualifiedName(name); len(msgs) > 0 || !strings.Contains(name, "/") {
			errs = append(errs, invalid(flags[i], name, "want a domain-prefixed resource name such as nvidia.com/gpu"))
			continue
		}
		if other, dup := seen[name]; dup {
			errs = append(errs, invalid(flags[i], name, "already used by --"+other))
		}
		seen[name] = flags[i]
	}
	return errs
}

// invalid says that --flag=value cannot work and what would.
func invalid(flag string, value any, want string) *field.Error {
	return field.Invalid(field.NewPath(flag), value, want)
}

// flagErrors joins every part's findings, each as the flag and value a
// user typed and what would work.
func flagErrors(list field.ErrorList) error {
	errs := make([]error, 0, len(list))
	for _, e := range list {
		value := e.BadValue
		if s, ok := value.(string); ok && s == "" {
			value = `""`
		}
		errs = append(errs, fmt.Errorf("--%s=%v is invalid: %s", e.Field, value, e.Detail))
	}
	return errors.Join(errs...)
}
