// Command vgpud shares GPUs between Kubernetes pods. Every replica of its
// DaemonSet runs the node role (device plugin); the elected leader also runs
// the cluster role (admission webhook and scheduler extender).
//
// This file is the only place that wires components together.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"sync/atomic"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/vgpud/vgpud/cluster/cache"
	"github.com/vgpud/vgpud/cluster/core"
	"github.com/vgpud/vgpud/cluster/extender"
	"github.com/vgpud/vgpud/cluster/leader"
	"github.com/vgpud/vgpud/cluster/metrics"
	"github.com/vgpud/vgpud/cluster/quota"
	"github.com/vgpud/vgpud/cluster/server"
	"github.com/vgpud/vgpud/node/agent"
	"github.com/vgpud/vgpud/webhook"
	"github.com/vgpud/vgpud/webhook/certs"
)

// shutdownGrace bounds how long the roles may take to stop after a signal.
const shutdownGrace = 10 * time.Second

func main() {
	os.Exit(runMain(os.Args, os.Stdout, os.Stderr))
}

// runMain returns the process exit code: 0 for a clean run or shutdown, 1 for
// an error, 2 for invalid settings.
func runMain(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
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
	runFlags := append(commonFlags(&cfg), nodeFlags(&cfg.Node)...)
	runFlags = append(runFlags, clusterFlags(&cfg.Cluster)...)
	runFlags = append(runFlags, webhookFlags(&cfg.Webhook)...)
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
					readSliceFlags(c, &cfg)
					if err := cfg.validate(); err != nil {
						return cli.Exit(err.Error(), 2)
					}
					log, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					return runWithSignals(c.Context, log, func(ctx context.Context) error {
						return runDaemon(ctx, cfg, log)
					})
				},
			},
			{
				Name:  "inspect",
				Usage: "show this node's GPUs, slices, allocations and registration, read from the running daemon",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "inspect-socket", EnvVars: envVar("inspect-socket"), Value: cfg.Node.InspectSocket, Usage: "the daemon's inspect socket"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
					&cli.BoolFlag{Name: "ready", Usage: "print nothing; exit 0 if the node role is serving and registered with kubelet, 1 if not (a readiness probe)"},
					&cli.StringFlag{Name: "inject-xid", Usage: "`GPU:XID` (GPU by index or UUID): deliver a fake XID event, to test health handling; mock and fake backends only"},
				},
				Action: func(c *cli.Context) error {
					if spec := c.String("inject-xid"); spec != "" {
						return runInjectXID(c.Context, c.String("inspect-socket"), spec, stdout)
					}
					return runInspect(c.Context, c.String("inspect-socket"), c.Bool("json"), c.Bool("ready"), stdout)
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
// then has shutdownGrace to return; a second signal gives up at once.
func runWithSignals(parent context.Context, log *slog.Logger, fn func(context.Context) error) error {
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
	case <-time.After(shutdownGrace):
		return cli.Exit(fmt.Sprintf("roles did not stop within %s of the signal", shutdownGrace), 1)
	}
}

// runDaemon runs the roles this replica was given until ctx ends or one fails.
func runDaemon(ctx context.Context, cfg config, log *slog.Logger) error {
	kube, err := newKubeClient(cfg.Kubeconfig, cfg.APIQPS)
	if err != nil {
		return err
	}
	leaseNS := cfg.Cluster.LeaseNamespace
	if leaseNS == "" {
		leaseNS = cfg.PodNamespace
	}
	var status agent.LeaderStatus = leader.NewLeaseHolder(kube, leaseNS, cfg.Cluster.LeaseName)
	var elector *leader.Elector
	if cfg.runs(roleCluster) {
		elector = leader.New(leader.Config{
			LeaseName:      cfg.Cluster.LeaseName,
			LeaseNamespace: leaseNS,
			Identity:       cfg.PodName,
			PodNamespace:   cfg.PodNamespace,
			LeaseDuration:  cfg.Cluster.LeaseDuration,
			RenewDeadline:  cfg.Cluster.RenewDeadline,
			RetryPeriod:    cfg.Cluster.RetryPeriod,
		}, kube, log.With("role", roleCluster, "component", "leader"))
		status = elector
	}
	g, ctx := errgroup.WithContext(ctx)
	if cfg.runs(roleNode) {
		a := agent.New(cfg.Node, cfg.NodeName, cfg.Resources, kube, status, strings.Join(cfg.Roles, "+"), log.With("role", roleNode))
		g.Go(func() error { return a.Run(ctx) })
	}
	if elector != nil {
		log := log.With("role", roleCluster)
		// The cluster role works only while this replica holds the Lease.
		g.Go(func() error {
			return elector.Run(ctx, func(ctx context.Context) error { return lead(ctx, cfg, kube, log) })
		})
	}
	return g.Wait()
}

// lead is the cluster role's work while this replica holds the Lease; its
// context ends when leadership does.
func lead(ctx context.Context, cfg config, kube kubernetes.Interface, log *slog.Logger) error {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(cache.Trim))
	quotas := quota.New(factory, cfg.Webhook.Resources)
	books := cache.New(cfg.Webhook.Resources)
	booksSynced, err := books.Watch(factory, log.With("component", "cache"))
	if err != nil {
		return fmt.Errorf("watch nodes and pods: %w", err)
	}
	events := podEvents(kube)
	defer events.shutdown()

	whCfg := cfg.Webhook
	whCfg.SchedulerName = cfg.Cluster.SchedulerName
	certMgr := certs.NewManager(whCfg.Certs(cfg.PodNamespace), kube, log.With("component", "webhook-certs"), time.Now)

	srv := server.New(cfg.Cluster.ListenAddr, certMgr.GetCertificate, log.With("component", "https"))
	admission := webhook.NewHTTPHandler(webhook.NewPods(whCfg, quotas), log.With("component", "webhook"))
	defaults := extender.Defaults{
		NodePolicy: cfg.Cluster.NodePolicy,
		GPUPolicy:  cfg.Cluster.GPUPolicy,
		Options:    core.Options{DefaultMemPercent: cfg.Cluster.DefaultMemPercent},
	}
	ext := extender.New(books, cfg.Webhook.Resources, defaults, events.warn, log.With("component", "extender"))
	binder := extender.NewBinder(kube, books, cfg.Webhook.Resources, defaults, cfg.Cluster.BindWait, events.normal, log.With("component", "bind"))
	prom := metrics.New(books)
	prom.SetLeader(true)
	defer prom.SetLeader(false)
	binder.Observe(prom.Bind)
	srv.Handle("/filter", prom.Instrument("filter", http.HandlerFunc(ext.Filter)))
	srv.Handle("/prioritize", prom.Instrument("prioritize", http.HandlerFunc(ext.Prioritize)))
	srv.Handle("/bind", prom.Instrument("bind", http.HandlerFunc(binder.Bind)))
	srv.Handle("/webhook", prom.Instrument("webhook", admission))
	var synced atomic.Bool
	srv.AddCheck(server.Check{Name: "informers", Func: func() error {
		if !synced.Load() {
			return errors.New("caches not synced yet")
		}
		return nil
	}})
	srv.AddCheck(server.Check{Name: "certificate", Func: certMgr.Ready})

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return certMgr.Run(ctx) })
	g.Go(func() error { return srv.Run(ctx) })
	if cfg.Cluster.MetricsAddr != "" {
		g.Go(func() error {
			return serveMetrics(ctx, cfg.Cluster.MetricsAddr, prom.Handler(), cfg.Cluster.Profiling, log)
		})
	}
	g.Go(func() error {
		factory.Start(ctx.Done())
		for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("sync %v informer: %w", typ, ctx.Err())
			}
		}
		if !toolscache.WaitForCacheSync(ctx.Done(), booksSynced) {
			return fmt.Errorf("fill the GPU cache: %w", ctx.Err())
		}
		synced.Store(true)
		log.Info("caches synced")
		<-ctx.Done()
		factory.Shutdown()
		return nil
	})
	return g.Wait()
}

// serveMetrics serves /metrics over plain HTTP until ctx ends.
func serveMetrics(ctx context.Context, addr string, h http.Handler, profiling bool, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("serving metrics", "addr", addr)
	select {
	case err := <-errc:
		return fmt.Errorf("serve metrics on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// eventSink records pod Events from component vgpud.
type eventSink struct {
	warn     func(pod *corev1.Pod, reason, message string)
	normal   func(pod *corev1.Pod, reason, message string)
	shutdown func()
}

// podEvents starts the Event broadcaster; call shutdown to flush and stop it.
func podEvents(kube kubernetes.Interface) eventSink {
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	rec := bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vgpud"})
	return eventSink{
		warn:     func(p *corev1.Pod, reason, msg string) { rec.Event(p, corev1.EventTypeWarning, reason, msg) },
		normal:   func(p *corev1.Pod, reason, msg string) { rec.Event(p, corev1.EventTypeNormal, reason, msg) },
		shutdown: bc.Shutdown,
	}
}

func newKubeClient(kubeconfig string, qps int) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (set --kubeconfig outside a cluster): %w", err)
	}
	// A bind is three writes (assignment, Binding, Event); client-go's
	// default 5 QPS, or even 200, would cap binds well below what the
	// apiserver takes (bench: 200 QPS held binds to 83/s).
	rc.QPS, rc.Burst = float32(qps), 2*qps
	rc.UserAgent = "vgpud/" + version
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kube, nil
}
