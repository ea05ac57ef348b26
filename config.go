package main

import (
	"errors"

	"fmt"
	"k8s.io/apimachinery/pkg/util/validation"
	"slices"
	"strings"

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

// config is every setting of `vgpud run`, filled from flags and env, and
// validated as a whole before anything starts.
type config struct {
	LogLevel     string
	LogFormat    string
	Kubeconfig   string
	APIQPS       int // client-side rate limit towards kube-apiserver
	NodeName     string
	PodName      string
	PodNamespace string
	Roles        []string
	Resources    protocol.ResourceNames

	Node    node.Config
	Cluster cluster.Config
	Webhook webhook.Config
}

func defaultConfig() config {
	return config{
		LogLevel:  "info",
		LogFormat: "auto",
		Roles:     []string{roleNode, roleCluster},
		APIQPS:    1000,
		Resources: protocol.DefaultResourceNames(),
		Node:      node.DefaultConfig(),
		Cluster:   cluster.DefaultConfig(),
		Webhook:   webhook.DefaultConfig(),
	}
}

func (c config) runs(role string) bool { return slices.Contains(c.Roles, role) }

// flagError names the flag, the value it got and what it accepts.
func flagError(flag string, value any, allowed string) error {
	return fmt.Errorf("--%s=%v is invalid: %s", flag, value, allowed)
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
		add(flagError("roles", "", "want node, cluster or node,cluster"))
	}
	for _, r := range c.Roles {
		if r != roleNode && r != roleCluster {
			add(flagError("roles", strings.Join(c.Roles, ","), "want node, cluster or node,cluster"))
			break
		}
	}
	if c.NodeName == "" && c.runs(roleNode) {
		add(flagError("node-name", `""`, "the node role needs the node's name; set NODE_NAME from the downward API (spec.nodeName)"))
	}
	if c.PodName == "" && c.runs(roleCluster) {
		add(flagError("pod-name", `""`, "leader election needs this replica's pod name; set POD_NAME from the downward API (metadata.name)"))
	}
	if c.PodNamespace == "" && c.runs(roleCluster) {
		add(flagError("pod-namespace", `""`, "set POD_NAMESPACE from the downward API (metadata.namespace)"))
	}
	add(validateResources(c.Resources))
	if c.APIQPS < 1 || c.APIQPS > 100000 {
		add(flagError("kube-api-qps", c.APIQPS, "want 1..100000 requests per second"))
	}
	if c.runs(roleNode) {
		add(validateNode(c.Node))
	}
	if c.runs(roleCluster) {
		add(validateCluster(c.Cluster))
		add(validateWebhook(c.Webhook))
	}
	return errors.Join(errs...)
}

// validateResources checks the extended-resource names: each a qualified
// name with a domain, as kubelet requires, and no two alike.
func validateResources(r protocol.ResourceNames) error {
	var errs []error
	flags := []string{"resource-gpu", "resource-gpumem", "resource-gpumem-percentage", "resource-gpucores", "resource-priority"}
	seen := map[string]string{}
	for i, name := range r.All() {
		if msgs := validation.IsQualifiedName(name); len(msgs) > 0 || !strings.Contains(name, "/") {
			errs = append(errs, flagError(flags[i], name, "want a domain-prefixed resource name such as nvidia.com/gpu"))
			continue
		}
		if other, dup := seen[name]; dup {
			errs = append(errs, flagError(flags[i], name, "already used by --"+other))
		}
		seen[name] = flags[i]
	}
	return errors.Join(errs...)
}
