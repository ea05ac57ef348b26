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

// commonFlags are the settings every role shares.
func commonFlags(cfg *config) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", EnvVars: envVar("log-level"), Value: cfg.LogLevel, Destination: &cfg.LogLevel},
		&cli.StringFlag{Name: "log-format", Usage: "auto (colour on a terminal), text, color or json", EnvVars: envVar("log-format"), Value: cfg.LogFormat, Destination: &cfg.LogFormat},
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file; empty means in-cluster", EnvVars: append(envVar("kubeconfig"), "KUBECONFIG"), Destination: &cfg.Kubeconfig},
		&cli.IntFlag{Name: "kube-api-qps", Usage: "requests per second this replica may send kube-apiserver (burst twice that); binds need three each", EnvVars: envVar("kube-api-qps"), Value: cfg.APIQPS, Destination: &cfg.APIQPS},
		&cli.StringFlag{Name: "node-name", Usage: "this node's name (downward API spec.nodeName)", EnvVars: []string{"NODE_NAME"}, Destination: &cfg.NodeName},
		&cli.StringFlag{Name: "pod-name", Usage: "this replica's pod name (downward API metadata.name)", EnvVars: []string{"POD_NAME"}, Destination: &cfg.PodName},
		&cli.StringFlag{Name: "pod-namespace", Usage: "this replica's namespace (downward API metadata.namespace)", EnvVars: []string{"POD_NAMESPACE"}, Destination: &cfg.PodNamespace},
		&cli.StringFlag{Name: "resource-gpu", Usage: "extended resource counting vGPUs; the device plugin registers it", EnvVars: envVar("resource-gpu"), Value: cfg.Resources.GPU, Destination: &cfg.Resources.GPU},
		&cli.StringFlag{Name: "resource-gpumem", Usage: "extended resource for MiB per vGPU", EnvVars: envVar("resource-gpumem"), Value: cfg.Resources.GPUMem, Destination: &cfg.Resources.GPUMem},
		&cli.StringFlag{Name: "resource-gpumem-percentage", Usage: "extended resource for percent of a GPU's memory", EnvVars: envVar("resource-gpumem-percentage"), Value: cfg.Resources.GPUMemPercentage, Destination: &cfg.Resources.GPUMemPercentage},
		&cli.StringFlag{Name: "resource-gpucores", Usage: "extended resource for percent of a GPU's SMs", EnvVars: envVar("resource-gpucores"), Value: cfg.Resources.GPUCores, Destination: &cfg.Resources.GPUCores},
		&cli.StringFlag{Name: "resource-priority", Usage: "extended resource for task priority", EnvVars: envVar("resource-priority"), Value: cfg.Resources.Priority, Destination: &cfg.Resources.Priority},
		&cli.StringSliceFlag{Name: "roles", Usage: "roles to run: node, cluster (the cluster role runs only while this replica leads)", EnvVars: envVar("roles"), Value: cli.NewStringSlice(cfg.Roles...)},
	}
}

// readSliceFlags copies the slice flags, which urfave/cli cannot bind to a
// plain []string, into cfg.
func readSliceFlags(c *cli.Context, cfg *config) {
	cfg.Roles = splitList(c.StringSlice("roles"))
	cfg.Node.Exclude = splitList(c.StringSlice("exclude-gpus"))
	cfg.Node.IgnoredXIDs = c.Uint64Slice("health-ignore-xids")
	// Both roles must agree on the names; the webhook reads its copy.
	cfg.Webhook.Resources = cfg.Resources
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
