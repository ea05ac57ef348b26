package clusterview

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Flags are the cluster view's flags, kubectl's where kubectl has
// one: `kubectl vgpud` and `vgpud inspect --cluster` share them.
func Flags(scheduler string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file; empty: $KUBECONFIG, ~/.kube/config, or in a pod its ServiceAccount"},
		&cli.StringFlag{Name: "context", Usage: "the kubeconfig context to use; empty: its current context"},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "show only this namespace's pods, the GPUs they hold and its quota"},
		&cli.StringFlag{Name: "node", Usage: "show only this node's GPUs and pods (read from the API for that node alone)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "wide (tables with GPU UUIDs and each node's identity mode), json or yaml; empty: tables"},
		&cli.StringFlag{Name: "scheduler-name", Value: scheduler, Usage: "vgpud's kube-scheduler profile: only its pods' assignments are booked"},
		&cli.StringFlag{Name: "claim-device-class", Value: wellknown.DRAClassGPU, Usage: "the DeviceClass whose DRA claims quota charges (the chart's is named after its release)"},
	}
}

// OptionsFrom reads Flags; --json, inspect's older spelling, is -o json.
func OptionsFrom(c *cli.Context, version string) Options {
	o := Options{Kubeconfig: c.String("kubeconfig"), Context: c.String("context"), Namespace: c.String("namespace"),
		Node: c.String("node"), Output: c.String("output"), Scheduler: c.String("scheduler-name"), ClaimClass: c.String("claim-device-class"), UserAgent: "vgpud-inspect/" + version}
	if c.Bool("json") && o.Output == "" {
		o.Output = "json"
	}
	return o
}

// PluginApp is vgpud as `kubectl vgpud`: the cluster view alone, with
// help that names it as kubectl users call it.
func PluginApp(stdout, stderr io.Writer, scheduler string, names wellknown.ResourceNames, version string) *cli.App {
	return &cli.App{
		Name:      "kubectl vgpud",
		Usage:     "show every node's GPUs (held, free, by which pods) and every namespace's GPU quota (charged, left), as vgpud books them",
		UsageText: "kubectl vgpud [-n NAMESPACE] [--node NODE] [-o wide|json|yaml] [--context NAME] [--kubeconfig FILE]",
		Description: "Reads nodes, pods, resource quotas and DRA claims from the API: bind the shipped vgpud-viewer ClusterRole (the chart's fullnameOverride, if set, replaces vgpud) " +
			"to the operators who run it (kubectl create clusterrolebinding <name> --clusterrole vgpud-viewer --user <user>); it reads every pod spec, so it is not a role for tenants.",
		Version:         version,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Flags:           Flags(scheduler),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("kubectl vgpud takes no arguments, only flags (kubectl vgpud --help)", 2)
			}
			return Show(c.Context, OptionsFrom(c, version), names, stdout)
		},
	}
}

// ClusterFlag is `vgpud inspect --cluster`.
func ClusterFlag() cli.Flag {
	return &cli.BoolFlag{Name: "cluster", Usage: "show every node's GPUs (held, free, by which pods) and every namespace's GPU quota (charged, left), read from the API with a kubeconfig, as kubectl vgpud does; the flags up to --claim-device-class are for it"}
}

// NoViewFlags refuses Flags set without --cluster.
func NoViewFlags(c *cli.Context) error {
	for _, f := range []string{"context", "namespace", "node", "output", "claim-device-class"} {
		if c.IsSet(f) {
			return cli.Exit("--"+f+" is for the cluster view: vgpud inspect --cluster, or kubectl vgpud", 2)
		}
	}
	return nil
}
