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
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
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
	"github.com/vgpud/vgpud/internal/exepages"
	"github.com/vgpud/vgpud/internal/kubeclient"
	"github.com/vgpud/vgpud/internal/logging"
	"github.com/vgpud/vgpud/internal/metricsserver"
	"github.com/vgpud/vgpud/internal/nslabels"
	"github.com/vgpud/vgpud/internal/process"
	"github.com/vgpud/vgpud/internal/timerslack"
	"github.com/vgpud/vgpud/node"
	"github.com/vgpud/vgpud/protocol/dradevices"
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
	setup, setupKube := node.NewNodeSetup(), kubeclient.DefaultOptions()
	// The settings these commands share with the role read the role's
	// environment too; their own flags do not.
	inspectFlags, preflightFlags := inspectCfg.InspectFlags(), preflightCfg.PreflightFlags()
	withEnv(inspectFlags[:1])
	withEnv(preflightFlags[:2])
	var nsCfg nslabels.Options
	nsKube := kubeclient.DefaultOptions()
	kubeFlags := nsKube.Flags()
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
					if err := timerslack.Check(os.LookupEnv); err != nil {
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
				Flags: slices.Concat([]cli.Flag{cluster.ClusterViewFlag()}, cluster.ViewFlags(cfg.Process.SchedulerName), inspectFlags),
				Action: func(c *cli.Context) error {
					if c.Bool(cluster.ClusterViewFlag().Names()[0]) {
						return cluster.Inspect(c, cfg.Process.Resources, version, stdout)
					}
					if err := cluster.NoViewFlags(c); err != nil {
						return err
					}
					return node.Inspect(c, inspectCfg, stdout)
				},
			},
			{
				Name:  "preflight",
				Usage: "read this node's container runtime configuration, imports and drop-ins included, and say whether the runtime fails closed without vgpud (exit 0) or not (exit 1), as the node role does every minute",
				Flags: preflightFlags,
				Action: func(c *cli.Context) error {
					return node.RunPreflight(c, preflightCfg, stdout)
				},
			},
			{
				Name:      "node-setup",
				Usage:     "install or remove vgpud's drop-in in this node's runtime configuration: by hand as root on the node, files only (containerd's main file is made to import it), then the preflight's verdict and the restart it needs; with --node, as the chart's init containers run it: preflight first, the runtime restarted where its files changed (one node at a time), the outcome on the node's vgpud.io/node-setup label. hold and wait-reverted are the chart's removal steps",
				ArgsUsage: "install|remove|hold|wait-reverted",
				Flags:     slices.Concat(withEnv(setup.SharedFlags()), setup.OwnFlags(), setupKube.Flags()),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("vgpud node-setup install|remove|hold|wait-reverted", 2)
					}
					kube := func() (kubeclient.Clients, error) {
						return kubeclient.New(setupKube, "vgpud/"+version+" node-setup", func(rt http.RoundTripper) http.RoundTripper { return rt })
					}
					return runWithSignals(c.Context, time.Minute, slog.New(slog.NewTextHandler(stderr, nil)), func(ctx context.Context) error {
						return setup.Run(ctx, c.Args().First(), kube, stdout)
					})
				},
			},
			{
				Name:  "namespace-labels",
				Usage: "set labels on vgpud's namespace (the chart's install hook: Pod Security privileged and vgpud's webhook skipped, where Helm made the namespace)",
				Flags: append(nsCfg.Flags(), kubeFlags...),
				Action: func(c *cli.Context) error {
					labels, err := nslabels.Parse(nsCfg.Labels)
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					kube, err := kubeclient.New(nsKube, "vgpud/"+version+" namespace-labels", func(rt http.RoundTripper) http.RoundTripper { return rt })
					if err != nil {
						return err
					}
					return nslabels.Apply(c.Context, kube.Core, nsCfg.Namespace, labels, stdout)
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

// startupPagesKept is how long the binary's pages that start-up mapped stay
// mapped: long enough for the roles' own start (the first inventory, the
// runtime hook's sync, kubelet's registration, the leader's first lists).
const startupPagesKept = 30 * time.Second

// daemonProcs is the replica's GOMAXPROCS unless GOMAXPROCS in its
// environment says otherwise. Its work is short requests and events one
// after another; with a P per core (every core of a GPU node: the
// DaemonSet sets no CPU limit) the runtime woke and spun idle Ps for each,
// which cost the leader CPU per pod and bought no latency (bench/runs.md,
// 17th session).
const daemonProcs = 1

// daemonMaxProcs is the GOMAXPROCS runDaemon sets, or 0 to leave Go's own
// where the environment's GOMAXPROCS (which lookup reads) set it.
func daemonMaxProcs(lookup func(string) (string, bool)) int {
	if v, ok := lookup("GOMAXPROCS"); ok && v != "" {
		return 0
	}
	return daemonProcs
}

// runDaemon runs the roles this replica was given until ctx ends or one fails.
func runDaemon(ctx context.Context, cfg config, log *slog.Logger) error {
	if n := daemonMaxProcs(os.LookupEnv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	slack, err := timerslack.Current()
	log.Info("runtime", "gomaxprocs", runtime.GOMAXPROCS(0), "timerSlack", slack)
	why := timerslack.Mismatch(os.LookupEnv, slack)
	if err != nil {
		why = err.Error()
	}
	if why != "" {
		log.Warn("the Go runtime's monitor thread wakes more often than vgpud meant; it costs CPU, nothing else", "why", why)
	}
	// One registry for the process, served from start on every replica.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	kube, err := kubeclient.New(cfg.Kube, "vgpud/"+version, apicalls.New(reg).Wrap)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		exepages.After(ctx, clock.RealClock{}, startupPagesKept, exepages.Release, log)
		return nil
	})
	// The replica's readiness is its node role's; one without (a bench's
	// leader) has nothing to wait for.
	ready := func() (bool, string) { return true, "" }
	var status node.LeaderStatus = cluster.LeaseHolder(cfg.Cluster, cfg.Process.PodNamespace, kube.Coordination)
	if cfg.Process.Runs(process.RoleCluster) {
		role := cluster.NewRole(cfg.Cluster, cluster.Replica{Name: cfg.Process.PodName, Namespace: cfg.Process.PodNamespace, Node: cfg.Process.NodeName}, cfg.Process.SchedulerName, cfg.Process.Resources, cfg.Webhook,
			cluster.API{Core: kube.Core, Leases: kube.Coordination, Events: kube.Events, Webhooks: kube.Admission, Deployments: kube.Apps,
				ClaimTemplates: kube.DRA.ResourceV1(), Claims: kube.DRA.ResourceV1(), ClaimsServed: kubeclient.Serves(kube.Discovery, "resource.k8s.io/v1"),
				ServerVersion: kube.Discovery.ServerVersion},
			reg, clock.RealClock{}, log.With("role", process.RoleCluster))
		status = role
		g.Go(func() error { return role.Run(ctx) })
	}
	if cfg.Process.Runs(process.RoleNode) {
		nodeCfg := cfg.Node
		if cfg.Process.PodName != "" && cfg.Process.PodNamespace != "" {
			nodeCfg.Pod = cfg.Process.PodNamespace + "/" + cfg.Process.PodName
		}
		mem, cores, err := cluster.ClaimDefaults(cfg.Cluster)
		if err != nil {
			log.Warn("DRA claims' defaults are the flags': the cluster settings file did not read", "err", err)
		}
		nodeCfg.ClaimDefaults = dradevices.ClaimDefaults{MemPercent: mem, Cores: cores}
		a := node.NewRole(nodeCfg, cfg.Process.NodeName, cfg.Process.Resources, node.API{Core: kube.Core, Events: kube.Events, Kube: kube.DRA}, status, strings.Join(cfg.Process.Roles, "+"),
			reg, clock.RealClock{}, log.With("role", process.RoleNode))
		ready = a.Ready
		g.Go(func() error { return a.Run(ctx) })
	}
	if why := cfg.Metrics.ProbeMismatch(); why != "" && cfg.Process.PodName != "" && cfg.Process.Runs(process.RoleNode) {
		log.Error("the DaemonSet's readiness probe, an HTTPS GET of /readyz on the metrics port, will fail: this pod stays unready and a rolling update stops at it; change the probe with the flag", "why", why)
	}
	if cfg.Metrics.MetricsListen != "" {
		var auth *metricsserver.Reviewer
		if cfg.Metrics.MetricsSecure {
			auth = metricsserver.NewReviewer(kube.Authn, kube.Authz)
		}
		g.Go(func() error {
			return metricsserver.Serve(ctx, cfg.Metrics.MetricsListen, reg, cfg.Metrics.Profiling, auth, ready, log)
		})
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
