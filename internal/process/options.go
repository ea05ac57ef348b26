// Package process is what the whole replica is: the roles it runs, the
// node and pod it is (from the downward API), how long it may take to
// stop, and the names both roles share (the scheduler profile and the
// extended resources).
package process

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Roles a replica can run. A DaemonSet replica runs both; one role alone
// is for benchmarks and debugging.
const (
	RoleNode    = "node"
	RoleCluster = "cluster"
)

// The flags of Options.
const (
	FlagNodeName      = "node-name"
	FlagPodName       = "pod-name"
	FlagPodNamespace  = "pod-namespace"
	FlagSchedulerName = "scheduler-name"
	FlagShutdownGrace = "shutdown-grace"
	FlagRoles         = "roles"
)

// ResourceFlags name the --resource-* flags in the order of
// wellknown.ResourceNames.All.
func ResourceFlags() []string {
	return []string{"resource-gpu", "resource-gpumem", "resource-gpumem-percentage", "resource-gpucores", "resource-priority"}
}

// Options are the replica's own settings and those several parts share.
type Options struct {
	NodeName     string
	PodName      string
	PodNamespace string
	Roles        []string
	// ShutdownGrace bounds how long the roles may take to stop after a
	// signal: the node role drains while the leader hands admission over,
	// both inside the pod's terminationGracePeriodSeconds (30 s).
	ShutdownGrace time.Duration
	// SchedulerName is the kube-scheduler profile that calls the extender:
	// the webhook gives it to GPU pods.
	SchedulerName string
	Resources     wellknown.ResourceNames
}

// DefaultOptions run both roles under vgpud-scheduler, with NVIDIA's and
// HAMi's resource names.
func DefaultOptions() Options {
	return Options{Roles: []string{RoleNode, RoleCluster}, ShutdownGrace: 20 * time.Second, SchedulerName: "vgpud-scheduler", Resources: wellknown.DefaultResourceNames()}
}

// Runs says whether the replica runs role.
func (o Options) Runs(role string) bool { return slices.Contains(o.Roles, role) }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: FlagNodeName, Usage: "this node's name (downward API spec.nodeName)", EnvVars: []string{"NODE_NAME"}, Destination: &o.NodeName},
		&cli.StringFlag{Name: FlagPodName, Usage: "this replica's pod name (downward API metadata.name)", EnvVars: []string{"POD_NAME"}, Destination: &o.PodName},
		&cli.StringFlag{Name: FlagPodNamespace, Usage: "this replica's namespace (downward API metadata.namespace)", EnvVars: []string{"POD_NAMESPACE"}, Destination: &o.PodNamespace},
		&cli.StringFlag{Name: FlagSchedulerName, Usage: "schedulerName of the kube-scheduler profile that calls the extender; the webhook gives it to GPU pods", Value: o.SchedulerName, Destination: &o.SchedulerName},
		&cli.DurationFlag{Name: FlagShutdownGrace, Usage: "how long the roles may take to stop after SIGTERM before vgpud exits anyway; keep it below the pod's terminationGracePeriodSeconds", Value: o.ShutdownGrace, Destination: &o.ShutdownGrace},
		&cli.StringSliceFlag{Name: FlagRoles, Usage: "roles to run: node, cluster (the cluster role runs only while this replica leads)", Value: cli.NewStringSlice(o.Roles...),
			Action: func(_ *cli.Context, v []string) error {
				o.Roles = slices.DeleteFunc(v, func(s string) bool { return s == "" })
				return nil
			}},
	}
	// The resource names, in the order of ResourceFlags.
	names := []*string{&o.Resources.GPU, &o.Resources.GPUMem, &o.Resources.GPUMemPercentage, &o.Resources.GPUCores, &o.Resources.Priority}
	usage := []string{
		"extended resource counting vGPUs; the device plugin registers it",
		"extended resource for MiB per vGPU",
		"extended resource for percent of a GPU's memory",
		"extended resource for percent of a GPU's SMs",
		"extended resource for task priority",
	}
	for i, flag := range ResourceFlags() {
		flags = append(flags, &cli.StringFlag{Name: flag, Usage: usage[i], Value: *names[i], Destination: names[i]})
	}
	return flags
}

// Validate reports what in o cannot work, by its flag: what each role it
// runs needs of the downward API among it.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	add := func(flag string, v any, want string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), v, want))
	}
	if len(o.Roles) == 0 || slices.ContainsFunc(o.Roles, func(r string) bool { return r != RoleNode && r != RoleCluster }) {
		add(FlagRoles, strings.Join(o.Roles, ","), "want node, cluster or node,cluster")
	}
	if o.NodeName == "" && o.Runs(RoleNode) {
		add(FlagNodeName, "", "the node role needs the node's name; set NODE_NAME from the downward API (spec.nodeName)")
	}
	if o.PodName == "" && o.Runs(RoleCluster) {
		add(FlagPodName, "", "leader election needs this replica's pod name; set POD_NAME from the downward API (metadata.name)")
	}
	if o.PodNamespace == "" && o.Runs(RoleCluster) {
		add(FlagPodNamespace, "", "set POD_NAMESPACE from the downward API (metadata.namespace)")
	}
	errs = append(errs, validateResources(o.Resources)...)
	if o.ShutdownGrace < time.Second {
		add(FlagShutdownGrace, o.ShutdownGrace, "want at least 1s, and less than the pod's terminationGracePeriodSeconds")
	}
	if o.Runs(RoleCluster) && (o.SchedulerName == "" || len(validation.IsDNS1123Subdomain(o.SchedulerName)) > 0) {
		add(FlagSchedulerName, o.SchedulerName, "want the scheduler profile name, e.g. vgpud-scheduler")
	}
	return errs
}

// validateResources checks the extended-resource names: each a qualified
// name with a domain, as kubelet requires, and no two alike.
func validateResources(r wellknown.ResourceNames) field.ErrorList {
	var errs field.ErrorList
	flags := ResourceFlags()
	seen := map[string]string{}
	for i, name := range r.All() {
		if msgs := validation.IsQualifiedName(name); len(msgs) > 0 || !strings.Contains(name, "/") {
			errs = append(errs, field.Invalid(field.NewPath(flags[i]), name, "want a domain-prefixed resource name such as nvidia.com/gpu"))
			continue
		}
		if other, dup := seen[name]; dup {
			errs = append(errs, field.Invalid(field.NewPath(flags[i]), name, fmt.Sprintf("already used by --%s", other)))
		}
		seen[name] = flags[i]
	}
	return errs
}
