package main

import (
	"reflect"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// The binary's own flags, and those several parts share; validate names
// a bad value by these.
const (
	flagLogLevel      = "log-level"
	flagLogFormat     = "log-format"
	flagKubeconfig    = "kubeconfig"
	flagKubeAPIQPS    = "kube-api-qps"
	flagNodeName      = "node-name"
	flagPodName       = "pod-name"
	flagPodNamespace  = "pod-namespace"
	flagSchedulerName = "scheduler-name"
	flagMetricsListen = "metrics-listen"
	flagMetricsSecure = "metrics-secure"
	flagShutdownGrace = "shutdown-grace"
	flagProfiling     = "profiling"
	flagRoles         = "roles"
)

// flagGroup is the flags of `vgpud run` that set one part's settings.
type flagGroup struct {
	name  string // as docs/settings.md titles it
	flags []cli.Flag
}

// flagGroups are every flag of `vgpud run`, by the part whose settings
// they set, each also read from its environment variable (withEnv);
// docs/settings.md's tables are these (settings_test.go).
func flagGroups(cfg *config) []flagGroup {
	groups := []flagGroup{
		{"both roles", commonFlags(cfg)},
		{"node role", cfg.Node.Flags()},
		{"cluster role", cfg.Cluster.Flags()},
		{"webhook", cfg.Webhook.Flags()},
	}
	for _, g := range groups {
		withEnv(g.flags)
	}
	return groups
}

// withEnv lets the environment set each flag that names no variable of
// its own: VGPUD_ plus the flag's name in upper snake case. The rule is
// the binary's, so the parts' flags carry none.
func withEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		env := reflect.ValueOf(f).Elem().FieldByName("EnvVars")
		if env.IsValid() && env.Len() == 0 {
			env.Set(reflect.ValueOf(envVar(f.Names()[0])))
		}
	}
	return flags
}

// isEmpty drops the empty entries of a list flag: "a,b," reads as [a b].
func isEmpty(s string) bool { return s == "" }

// envVar is the environment variable that also sets a flag.
func envVar(flag string) []string {
	return []string{"VGPUD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// commonFlags are the settings of the whole process, or shared by roles.
func commonFlags(cfg *config) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: flagLogLevel, Usage: "debug, info, warn or error", Value: cfg.LogLevel, Destination: &cfg.LogLevel},
		&cli.StringFlag{Name: flagLogFormat, Usage: strings.Join(logFormats(), ", ") + " (auto: colour on a terminal)", Value: cfg.LogFormat, Destination: &cfg.LogFormat},
		&cli.StringFlag{Name: flagKubeconfig, Usage: "kubeconfig file; empty means in-cluster", EnvVars: append(envVar(flagKubeconfig), "KUBECONFIG"), Destination: &cfg.Kubeconfig},
		&cli.IntFlag{Name: flagKubeAPIQPS, Usage: "requests per second this replica may send kube-apiserver (burst twice that); binds need three each", Value: cfg.KubeAPIQPS, Destination: &cfg.KubeAPIQPS},
		&cli.StringFlag{Name: flagNodeName, Usage: "this node's name (downward API spec.nodeName)", EnvVars: []string{"NODE_NAME"}, Destination: &cfg.NodeName},
		&cli.StringFlag{Name: flagPodName, Usage: "this replica's pod name (downward API metadata.name)", EnvVars: []string{"POD_NAME"}, Destination: &cfg.PodName},
		&cli.StringFlag{Name: flagPodNamespace, Usage: "this replica's namespace (downward API metadata.namespace)", EnvVars: []string{"POD_NAMESPACE"}, Destination: &cfg.PodNamespace},
		&cli.StringFlag{Name: flagSchedulerName, Usage: "schedulerName of the kube-scheduler profile that calls the extender; the webhook gives it to GPU pods", Value: cfg.SchedulerName, Destination: &cfg.SchedulerName},
		&cli.StringFlag{Name: flagMetricsListen, Usage: "address of /metrics, served by every replica from start; empty disables", Value: cfg.MetricsListen, Destination: &cfg.MetricsListen},
		&cli.BoolFlag{Name: flagMetricsSecure, Usage: "serve /metrics over HTTPS only to callers whose token may get it (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone", Value: cfg.MetricsSecure, Destination: &cfg.MetricsSecure},
		&cli.DurationFlag{Name: flagShutdownGrace, Usage: "how long the roles may take to stop after SIGTERM before vgpud exits anyway; keep it below the pod's terminationGracePeriodSeconds", Value: cfg.ShutdownGrace, Destination: &cfg.ShutdownGrace},
		&cli.BoolFlag{Name: flagProfiling, Usage: "serve Go's /debug/pprof on the metrics address (for benchmarks and debugging)", Value: cfg.Profiling, Destination: &cfg.Profiling},
		&cli.StringSliceFlag{Name: flagRoles, Usage: "roles to run: node, cluster (the cluster role runs only while this replica leads)", Value: cli.NewStringSlice(cfg.Roles...),
			Action: func(_ *cli.Context, v []string) error { cfg.Roles = slices.DeleteFunc(v, isEmpty); return nil }},
	}
	// The resource names, in the order of resourceFlags.
	names := []*string{&cfg.Resources.GPU, &cfg.Resources.GPUMem, &cfg.Resources.GPUMemPercentage, &cfg.Resources.GPUCores, &cfg.Resources.Priority}
	usage := []string{
		"extended resource counting vGPUs; the device plugin registers it",
		"extended resource for MiB per vGPU",
		"extended resource for percent of a GPU's memory",
		"extended resource for percent of a GPU's SMs",
		"extended resource for task priority",
	}
	for i, flag := range resourceFlags() {
		flags = append(flags, &cli.StringFlag{Name: flag, Usage: usage[i], Value: *names[i], Destination: names[i]})
	}
	return flags
}
