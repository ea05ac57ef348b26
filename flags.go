package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// envVar is the environment variable that also sets a flag: VGPUD_ plus
// the flag's name in upper snake case.
func envVar(flag string) []string {
	return []string{"VGPUD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// flagGroup is the flags of `vgpud run` that set one part's settings.
type flagGroup struct {
	name  string // as the README's settings section titles it
	flags []cli.Flag
}

// flagGroups are every flag of `vgpud run`, by the part whose settings
// they set; the README's settings tables are these (settings_test.go).
func flagGroups(cfg *config) []flagGroup {
	return []flagGroup{
		{"both roles", commonFlags(cfg)},
		{"node role", nodeFlags(&cfg.Node)},
		{"cluster role", clusterFlags(&cfg.Cluster)},
		{"webhook", webhookFlags(&cfg.Webhook)},
	}
}

// commonFlags are the settings of the whole process, or shared by roles.
func commonFlags(cfg *config) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", EnvVars: envVar("log-level"), Value: cfg.LogLevel, Destination: &cfg.LogLevel},
		&cli.StringFlag{Name: "log-format", Usage: strings.Join(logFormats(), ", ") + " (auto: colour on a terminal)", EnvVars: envVar("log-format"), Value: cfg.LogFormat, Destination: &cfg.LogFormat},
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file; empty means in-cluster", EnvVars: append(envVar("kubeconfig"), "KUBECONFIG"), Destination: &cfg.Kubeconfig},
		&cli.IntFlag{Name: "kube-api-qps", Usage: "requests per second this replica may send kube-apiserver (burst twice that); binds need three each", EnvVars: envVar("kube-api-qps"), Value: cfg.KubeAPIQPS, Destination: &cfg.KubeAPIQPS},
		&cli.StringFlag{Name: "node-name", Usage: "this node's name (downward API spec.nodeName)", EnvVars: []string{"NODE_NAME"}, Destination: &cfg.NodeName},
		&cli.StringFlag{Name: "pod-name", Usage: "this replica's pod name (downward API metadata.name)", EnvVars: []string{"POD_NAME"}, Destination: &cfg.PodName},
		&cli.StringFlag{Name: "pod-namespace", Usage: "this replica's namespace (downward API metadata.namespace)", EnvVars: []string{"POD_NAMESPACE"}, Destination: &cfg.PodNamespace},
		&cli.StringFlag{Name: "scheduler-name", Usage: "schedulerName of the kube-scheduler profile that calls the extender; the webhook gives it to GPU pods", EnvVars: envVar("scheduler-name"), Value: cfg.SchedulerName, Destination: &cfg.SchedulerName},
		&cli.StringFlag{Name: "metrics-listen", Usage: "address of /metrics, served by every replica from start; empty disables", EnvVars: envVar("metrics-listen"), Value: cfg.MetricsListen, Destination: &cfg.MetricsListen},
		&cli.BoolFlag{Name: "metrics-secure", Usage: "serve /metrics over HTTPS only to callers whose token may get it (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone", EnvVars: envVar("metrics-secure"), Value: cfg.MetricsSecure, Destination: &cfg.MetricsSecure},
		&cli.DurationFlag{Name: "shutdown-grace", Usage: "how long the roles may take to stop after SIGTERM before vgpud exits anyway; keep it below the pod's terminationGracePeriodSeconds", EnvVars: envVar("shutdown-grace"), Value: cfg.ShutdownGrace, Destination: &cfg.ShutdownGrace},
		&cli.BoolFlag{Name: "profiling", Usage: "serve Go's /debug/pprof on the metrics address (for benchmarks and debugging)", EnvVars: envVar("profiling"), Value: cfg.Profiling, Destination: &cfg.Profiling},
		&cli.StringSliceFlag{Name: "roles", Usage: "roles to run: node, cluster (the cluster role runs only while this replica leads)", EnvVars: envVar("roles"), Value: cli.NewStringSlice(cfg.Roles...)},
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
		flags = append(flags, &cli.StringFlag{Name: flag, Usage: usage[i], EnvVars: envVar(flag), Value: *names[i], Destination: names[i]})
	}
	return flags
}

// readSliceFlags copies the slice flags, which urfave/cli cannot bind to a
// plain []string, into cfg.
func readSliceFlags(c *cli.Context, cfg *config) {
	cfg.Roles = splitList(c.StringSlice("roles"))
	cfg.Node.ExcludeGPUs = splitList(c.StringSlice("exclude-gpus"))
	cfg.Node.NRIExemptNamespaces = splitList(c.StringSlice("nri-exempt-namespaces"))
	cfg.Node.HealthIgnoreXIDs = c.Uint64Slice("health-ignore-xids")
}

// splitList trims entries and drops empty ones, so "a, b," reads as [a b].
func splitList(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
