// Command vgpud shares GPUs between Kubernetes pods. Every replica of its
// DaemonSet runs the node role (device plugin); the elected leader also runs
// the cluster role (admission webhook and scheduler extender).
//
// This file wires the process: it builds each role from its settings and
// dependencies; cluster.Role then wires the cluster role's own parts.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/internal/apicalls"
	"github.com/vgpud/vgpud/internal/kubeclient"
	"github.com/vgpud/vgpud/internal/logging"
	"github.com/vgpud/vgpud/internal/metricsserver"
	"github.com/vgpud/vgpud/internal/process"
	"github.com/vgpud/vgpud/node"
)

func main() {
	os.Exit(runMain(os.Args, os.Stdout, os.Stderr))
}

// runMain returns the process exit code: 0 for a clean run or shutdown, 1 for
// an error, 2 for invalid settings.
func runMain(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	if isKubectlPlugin(args) {
		cfg := defaultConfig()
		app = cluster.KubectlPlugin(stdout, stderr, cfg.Process.SchedulerName, cfg.Process.Resources, version)
	}
	if err := app.Run(args); err != nil {
		fmt.Fprintln(stderr, "vgpud:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

func newApp(stdout, stderr io.Writer) *cli.App {
	cfg := defaultConfig()
	inspectCfg := node.DefaultConfig()   // only its socket: inspect's own copy
	preflightCfg := node.DefaultConfig() // only the runtime's settings
	var runFlags []cli.Flag
	for _, g := range flagGroups(&cfg) {
		runFlags = append(runFlags, g.flags...)
	}
	return &cli.App{
		Name:      "vgpud",
		Usage:     "share GPUs between Kubernetes pods",
		Writer:    stdout,
		ErrWriter: stderr,
		// runMain prints errors and picks the exit code; urfave/cli would
		// otherwise call os.Exit from inside Run.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			{
				Name:  "run",
				Usage: "run the daemon: the node role on every replica, the cluster role while leading",
				Flags: runFlags,
				Action: func(c *cli.Context) error {
					if err := cfg.validate(); err != nil {
						return cli.Exit(err.Error(), 2)
					}
					log, err := logging.New(stderr, cfg.Logging)
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					return runWithSignals(c.Context, cfg.Process.ShutdownGrace, log, func(ctx context.Context) error {
						return runDaemon(ctx, cfg, log)
					})
				},
			},
			{
				Name:  "inspect",
				Usage: "show this node's GPUs, slices, allocations and registration, read from the running daemon; with --cluster, every node's and namespace's, read from the API",
				Flags: append([]cli.Flag{
					&cli.BoolFlag{Name: "cluster", Usage: "show every node's GPUs (held, free, by which pods) and every namespace's GPU quota (charged, left), read from the API with a kubeconfig, as kubectl vgpud does; the flags up to --scheduler-name are for it"},
				}, append(cluster.ViewFlags(cfg.Process.SchedulerName),
					withEnv([]cli.Flag{inspectCfg.Inspect.InspectSocketFlag()})[0],
					&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
					&cli.BoolFlag{Name: "ready", Usage: "print nothing; exit 0 if the node role is serving and registered with kubelet, 1 if not (a readiness probe)"},
					&cli.StringFlag{Name: "inject-xid", Usage: "`GPU:XID` (GPU by index or UUID): deliver a fake XID event, to test health handling; mock and fake backends only"},
					&cli.StringFlag{Name: "mock-unplug", Usage: "`GPU` (index or UUID): take a GPU off the machine, as one fallen off the bus, to test GPUs that come and go; mock and fake backends only"},
					&cli.StringFlag{Name: "mock-plug", Usage: "`GPU` (index or UUID): put an unplugged GPU back; mock and fake backends only"},
					&cli.StringFlag{Name: "mock-process", Usage: "`GPU:PID:MiB[:SM%]` (GPU by index or UUID, or a MIG device by UUID; PID on the host): declare that a process uses the GPU, to test usage sampling and enforcement; MiB 0 takes it off; mock and fake backends only"},
				)...),
				Action: func(c *cli.Context) error {
					if c.Bool("cluster") {
						return cluster.Inspect(c, cfg.Process.Resources, version, stdout)
					}
					for _, f := range []string{"context", "namespace", "node", "output"} {
						if c.IsSet(f) {
							return cli.Exit("--"+f+" is for the cluster view: vgpud inspect --cluster, or kubectl vgpud", 2)
						}
					}
					if spec := c.String("inject-xid"); spec != "" {
						return node.InjectXID(c.Context, inspectCfg.Inspect.InspectSocket, spec, stdout)
					}
					if gpu := c.String("mock-unplug"); gpu != "" {
						return node.SetMockPlugged(c.Context, inspectCfg.Inspect.InspectSocket, gpu, false, stdout)
					}
					if gpu := c.String("mock-plug"); gpu != "" {
						return node.SetMockPlugged(c.Context, inspectCfg.Inspect.InspectSocket, gpu, true, stdout)
					}
					if spec := c.String("mock-process"); spec != "" {
						return node.SetMockProcess(c.Context, inspectCfg.Inspect.InspectSocket, spec, stdout)
					}
					return node.Inspect(c.Context, inspectCfg.Inspect.InspectSocket, c.Bool("json"), c.Bool("ready"), stdout)
				},
			},
			{
				Name:  "preflight",
				Usage: "read this node's container runtime configuration, imports and drop-ins included, and say whether the runtime fails closed without vgpud (exit 0) or not (exit 1), as the node role does every minute",
				Flags: append(withEnv([]cli.Flag{preflightCfg.RuntimeConfigFlag(), preflightCfg.NRISocketFlag()}),
					&cli.BoolFlag{Name: "json", Usage: "print JSON instead of text"}),
				Action: func(c *cli.Context) error {
					return node.RunPreflight(preflightCfg, c.Bool("json"), stdout)
				},
			},
			{
				Name:      "node-setup",
				Usage:     "install or remove vgpud's drop-in in this node's runtime configuration (root, on the node): with install, containerd's main file is made to import it; then prints the preflight's verdict and the restart it needs. Opt-in: nothing runs it for you",
				ArgsUsage: "install|remove",
				Flags:     withEnv([]cli.Flag{preflightCfg.RuntimeConfigFlag(), preflightCfg.NRISocketFlag()}),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("vgpud node-setup install|remove", 2)
					}
					return node.RunNodeSetup(preflightCfg, c.Args().First(), stdout)
				},
			},
			{
				Name:  "version",
				Usage: "print the version and commit",
				Action: func(c *cli.Context) error {
					fmt.Fprintf(stdout, "vgpud %s (commit %s, %s)\n", version, commit, runtime.Version())
					return nil
				},
			},
		},
	}
}

// runWithSignals runs fn under a context that SIGINT or SIGTERM cancels. fn
// then has grace to return; a second signal gives up at once.
func runWithSignals(parent context.Context, grace time.Duration, log *slog.Logger, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()

	select {
	case err := <-done:
		return err
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
		cancel()
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		log.Info("stopped cleanly")
		return nil
	case sig := <-sigs:
		return cli.Exit(fmt.Sprintf("second %s: exiting without waiting for the roles to stop", sig), 130)
	case <-time.After(grace):
		return cli.Exit(fmt.Sprintf("roles did not stop within %s of the signal (--shutdown-grace)", grace), 1)
	}
}

// runDaemon runs the roles this replica was given until ctx ends or one fails.
func runDaemon(ctx context.Context, cfg config, log *slog.Logger) error {
	// One registry for the process, served from start on every replica.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	kube, err := kubeclient.New(cfg.Kube, "vgpud/"+version, apicalls.New(reg).Wrap)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	if cfg.Metrics.MetricsListen != "" {
		var auth *metricsserver.Reviewer
		if cfg.Metrics.MetricsSecure {
			auth = metricsserver.NewReviewer(kube.Authn, kube.Authz)
		}
		g.Go(func() error {
			return metricsserver.Serve(ctx, cfg.Metrics.MetricsListen, reg, cfg.Metrics.Profiling, auth, log)
		})
	}
	var status node.LeaderStatus = cluster.LeaseHolder(cfg.Cluster, cfg.Process.PodNamespace, kube.Coordination)
	if cfg.Process.Runs(process.RoleCluster) {
		role := cluster.NewRole(cfg.Cluster, cluster.Pod{Name: cfg.Process.PodName, Namespace: cfg.Process.PodNamespace, Node: cfg.Process.NodeName}, cfg.Process.SchedulerName, cfg.Process.Resources, cfg.Webhook,
			cluster.API{Core: kube.Core, Leases: kube.Coordination, Events: kube.Events, Webhooks: kube.Admission, Deployments: kube.Apps, ServerVersion: kube.Discovery.ServerVersion},
			reg, clock.RealClock{}, log.With("role", process.RoleCluster))
		status = role
		g.Go(func() error { return role.Run(ctx) })
	}
	if cfg.Process.Runs(process.RoleNode) {
		nodeCfg := cfg.Node
		if cfg.Process.PodName != "" && cfg.Process.PodNamespace != "" {
			nodeCfg.Pod = cfg.Process.PodNamespace + "/" + cfg.Process.PodName
		}
		a := node.NewRole(nodeCfg, cfg.Process.NodeName, cfg.Process.Resources, node.API{Core: kube.Core, Events: kube.Events}, status, strings.Join(cfg.Process.Roles, "+"),
			reg, clock.RealClock{}, log.With("role", process.RoleNode))
		g.Go(func() error { return a.Run(ctx) })
	}
	return g.Wait()
}

// kubectlPlugin is the name under which kubectl runs vgpud as `kubectl
// vgpud` (the binary, or a link to it, on PATH).
const kubectlPlugin = "kubectl-vgpud"

// isKubectlPlugin says whether args[0] is the plugin's name: kubectl runs
// the plugin with the arguments after its name and its own environment
// (KUBECONFIG included).
func isKubectlPlugin(args []string) bool {
	return len(args) > 0 && filepath.Base(args[0]) == kubectlPlugin
}
