package main

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/internal/kubeclient"
	"github.com/vgpud/vgpud/internal/logging"
	"github.com/vgpud/vgpud/internal/metricsserver"
	"github.com/vgpud/vgpud/internal/process"
	"github.com/vgpud/vgpud/node"
	"github.com/vgpud/vgpud/webhook"
)

// config is every setting of `vgpud run`, filled from flags and env, and
// validated as a whole before anything starts: each part's Options, with
// its defaults, flags and checks in that part.
type config struct {
	Process process.Options
	Logging logging.Options
	Kube    kubeclient.Options
	Metrics metricsserver.Options
	Node    node.Config
	Cluster cluster.Config
	Webhook webhook.Config
}

func defaultConfig() config {
	return config{
		Process: process.DefaultOptions(),
		Logging: logging.DefaultOptions(),
		Kube:    kubeclient.DefaultOptions(),
		Metrics: metricsserver.DefaultOptions(),
		Node:    node.DefaultConfig(),
		Cluster: cluster.DefaultConfig(),
		Webhook: webhook.DefaultConfig(),
	}
}

// validate reports every invalid setting, one per line, by its flag: the
// whole process's, and those of the roles it runs.
func (c config) validate() error {
	errs := slices.Concat(c.Process.Validate(), c.Logging.Validate(), c.Kube.Validate(), c.Metrics.Validate())
	if c.Process.Runs(process.RoleNode) {
		errs = append(errs, c.Node.Validate()...)
	}
	if c.Process.Runs(process.RoleCluster) {
		errs = slices.Concat(errs, c.Cluster.Validate(), c.Webhook.Validate())
	}
	return flagErrors(errs)
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
