package main

import (
	"io"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/protocol"
)

// kubectlPlugin is the name under which kubectl runs vgpud as `kubectl
// vgpud` (the binary, or a link to it, on PATH).
const kubectlPlugin = "kubectl-vgpud"

// isKubectlPlugin says whether args[0] is the plugin's name: kubectl runs
// the plugin with the arguments after its name and its own environment
// (KUBECONFIG included).
func isKubectlPlugin(args []string) bool {
	return len(args) > 0 && filepath.Base(args[0]) == kubectlPlugin
}

// viewFlags are the cluster view's flags, kubectl's where kubectl has
// one: `kubectl vgpud` and `vgpud inspect --cluster` share them.
func viewFlags(scheduler string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file; empty: $KUBECONFIG, ~/.kube/config, or in a pod its ServiceAccount"},
		&cli.StringFlag{Name: "context", Usage: "the kubeconfig context to use; empty: its current context"},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "show only this namespace's pods, the GPUs they hold and its quota"},
		&cli.StringFlag{Name: "node", Usage: "show only this node's GPUs and pods (read from the API for that node alone)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "wide (tables with GPU UUIDs and each node's identity mode), json or yaml; empty: tables"},
		&cli.StringFlag{Name: "scheduler-name", Value: scheduler, Usage: "vgpud's kube-scheduler profile: only its pods' assignments are booked"},
	}
}

// viewOptions reads viewFlags; --json, inspect's older spelling, is -o json.
func viewOptions(c *cli.Context) cluster.ViewOptions {
	o := cluster.ViewOptions{Kubeconfig: c.String("kubeconfig"), Context: c.String("context"), Namespace: c.String("namespace"),
		Node: c.String("node"), Output: c.String("output"), Scheduler: c.String("scheduler-name"), UserAgent: "vgpud-inspect/" + version}
	if c.Bool("json") && o.Output == "" {
		o.Output = "json"
	}
	return o
}

// newPluginApp is vgpud as `kubectl vgpud`: the cluster view alone, with
// help that names it as kubectl users call it.
func newPluginApp(stdout, stderr io.Writer, scheduler string, names protocol.ResourceNames) *cli.App {
	return &cli.App{
		Name:      "kubectl vgpud",
		Usage:     "show every node's GPUs (held, free, by which pods) and every namespace's GPU quota (charged, left), as vgpud books them",
		UsageText: "kubectl vgpud [-n NAMESPACE] [--node NODE] [-o wide|json|yaml] [--context NAME] [--kubeconfig FILE]",
		Description: "Reads nodes, pods and resource quotas from the API: bind the shipped vgpud-viewer ClusterRole " +
			"to the operators who run it (kubectl create clusterrolebinding <name> --clusterrole vgpud-viewer --user <user>); it reads every pod spec, so it is not a role for tenants.",
		Version:         version,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Flags:           viewFlags(scheduler),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("kubectl vgpud takes no arguments, only flags (kubectl vgpud --help)", 2)
			}
			return cluster.Inspect(c.Context, viewOptions(c), names, stdout)
		},
	}
}
