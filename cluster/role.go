// Package cluster is the cluster role: while this replica leads, it keeps
// the GPU books from the API and serves the admission webhook and the
// scheduler extender, each on its own HTTPS listener. Its parts live under
// internal/, private to it (fit: the scheduling core; books; extender;
// quota; slimpod: what the leader keeps of a pod; server: the listeners
// and their TLS; leader; clusterview: inspect --cluster; clustermetrics).
// The binary starts it through this package alone: its settings
// (config.go, flags.go, validate.go), Role (role.go builds a term's parts,
// then runs them) and Inspect.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/clustermetrics"
	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/filewatch"
	"github.com/vgpud/vgpud/cluster/internal/leader"
	"github.com/vgpud/vgpud/cluster/internal/preemptor"
	"github.com/vgpud/vgpud/cluster/internal/quota"
	"github.com/vgpud/vgpud/cluster/internal/requeue"
	"github.com/vgpud/vgpud/cluster/internal/schedulerskew"
	"github.com/vgpud/vgpud/cluster/internal/server"
	"github.com/vgpud/vgpud/cluster/internal/server/certs"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/cluster/internal/watches"
	"github.com/vgpud/vgpud/protocol/podevents"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/webhook"
)

// API is what the cluster role calls: core/v1 (pods, nodes, quotas,
// Bindings, the TLS Secret), Events, its MutatingWebhookConfiguration and
// kube-scheduler's Deployment (restarted for a new client certificate).
type API struct {
	Core        corev1client.CoreV1Interface
	Leases      coordinationv1client.LeasesGetter
	Events      eventsv1client.EventsV1Interface
	Webhooks    admissionregistrationv1client.MutatingWebhookConfigurationsGetter
	Deployments appsv1client.DeploymentsGetter
	// ClaimTemplates are made in the namespaces whose GPU pods become
	// DRA claims (webhook.ClaimPods); Claims are charged to quota where
	// ClaimsServed says the apiserver serves them (nil: it does).
	ClaimTemplates resourcev1client.ResourceClaimTemplatesGetter
	Claims         resourcev1client.ResourceClaimsGetter
	ClaimsServed   func() (bool, error)
	// ServerVersion is the apiserver's (discovery), for the
	// kube-scheduler skew warning; nil skips the check.
	ServerVersion func() (*apimachineryversion.Info, error)
}

// Role is the cluster role of one replica, built from explicit
// dependencies: Run campaigns for the Lease, and Lead runs the role for
// each term of leadership.
type Role struct {
	cfg       Config
	pod       string // this replica's pod name: its identity in the Lease
	namespace string // this pod's namespace: the TLS Secret and Service live there
	scheduler string // kube-scheduler profile that calls the extender
	names     wellknown.ResourceNames
	admission webhook.Config
	api       API
	metrics   *clustermetrics.Metrics
	elector   *leader.Elector
	// policy is the scheduling defaults in force: the flags', then the
	// settings file's (loadSettings), shared by every term.
	policy *extender.Policy
	clock  clock.WithTicker
	log    *slog.Logger
}

// Replica is this replica's pod, from the downward API.
type Replica struct{ Name, Namespace, Node string }

// NewRole returns the cluster role of the replica pod. Its metrics are
// registered on reg. clk times every wait, hold and expiry of the role
// but the Lease's own.
func NewRole(cfg Config, pod Replica, scheduler string, names wellknown.ResourceNames, admission webhook.Config,
	api API, reg prometheus.Registerer, clk clock.WithTicker, log *slog.Logger) *Role {
	m := clustermetrics.New(reg)
	elector := leader.New(cfg.Leader.Config(pod.Name, pod.Namespace, pod.Node), api.Leases, api.Core, clk, log.With("component", "leader"))
	elector.OnTakenOutOfTurn(m.LeaseTaken)
	elector.OnChange(m.LeaderChange)
	elector.EventsTo(api.Events)
	return &Role{cfg: cfg, pod: pod.Name, namespace: pod.Namespace, scheduler: scheduler, names: names, admission: admission,
		api: api, metrics: m, elector: elector, policy: extender.NewPolicy(cfg.Scheduling.Defaults()), clock: clk, log: log}
}

// Run campaigns for the Lease until ctx ends, and leads while it holds
// it. The settings file is read first, and followed meanwhile, led or not.
func (r *Role) Run(ctx context.Context) error {
	if r.cfg.Settings.ClusterSettingsFile != "" {
		log, lastErr := r.log.With("component", "settings"), ""
		r.loadSettings(log, &lastErr)
		go filewatch.Follow(ctx, r.cfg.Settings.ClusterSettingsFile, settingsRecheck, r.clock, log, func() { r.loadSettings(log, &lastErr) })
	}
	return r.elector.Run(ctx, r.Lead)
}

// Leader is the Lease holder's identity as this replica last saw it.
func (r *Role) Leader() string { return r.elector.Leader() }

// IsLeader says whether this replica leads now.
func (r *Role) IsLeader() bool { return r.elector.IsLeader() }

// LeaseHolder reads who holds the Lease, for a replica that runs only the
// node role and so never campaigns.
func LeaseHolder(cfg Config, podNamespace string, leases coordinationv1client.LeasesGetter) leader.LeaseHolder {
	return leader.NewLeaseHolder(leases, cfg.Leader.Namespace(podNamespace), cfg.Leader.LeaseName)
}

// Lead is the cluster role's work while this replica holds the Lease; ctx
// ends when leadership does. Every term builds its parts afresh (build),
// so a new leader never trusts a previous term's memory, then runs them
// (run): it takes traffic (term.Serve) only once its books are complete,
// and every bind write is fenced by term.Fence.
func (r *Role) Lead(ctx context.Context, term leader.Term) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t, err := r.build(ctx, term)
	if err != nil {
		return err
	}
	go schedulerskew.Check(ctx, r.api.Deployments, r.namespace, r.cfg.TLS.SchedulerDeployment, r.api.ServerVersion, r.log.With("component", "scheduler-skew"))
	err = t.run(ctx, term)
	cancel() // what the term left running ends with it, before close waits
	t.close()
	return err
}

// termParts are one term's parts, built and not yet running.
type termParts struct {
	inf         *watches.Informers
	booksSynced toolscache.InformerSynced
	certs       *certs.Manager
	webhook     *server.Server // the webhook and the probes
	extender    *server.Server // filter, prioritize, bind: kube-scheduler only
	binder      *extender.Binder
	synced      *atomic.Bool // the books are complete: take traffic
	policy      *extender.Policy
	close       func()
	log         *slog.Logger
}

// build makes one term's parts and wires them to each other; nothing
// runs yet but the Event broadcaster, which ends with ctx.
func (r *Role) build(ctx context.Context, term leader.Term) (*termParts, error) {
	log := r.log
	inf, err := watches.New(r.api.Core, r.claims(), books.Transform(r.names))
	if err != nil {
		return nil, err
	}
	quotas := quota.New(inf.Pods, inf.Quotas, r.names)
	ledger := books.New(r.names, r.scheduler, r.clock)

	ledger.KeepDeletedInFlight(r.cfg.Scheduling.DeletedInFlight())
	booksSynced, err := ledger.Watch(inf.Pods, inf.Nodes, log.With("component", "books"))
	if err != nil {
		return nil, fmt.Errorf("watch nodes and pods: %w", err)
	}
	events, err := podevents.Start(ctx, r.api.Events)
	if err != nil {
		return nil, err
	}
	stopMetrics := r.metrics.Lead(ledger, quotas)

	tlsCfg := r.cfg.TLS
	tlsCfg.Namespace = r.namespace
	certMgr := certs.NewManager(tlsCfg, certs.API{Secrets: r.api.Core, Pods: r.api.Core, Deployments: r.api.Deployments, Webhooks: r.api.Webhooks}, log.With("component", "tls"), r.clock)
	certMgr.ObserveWith(r.metrics)
	t := &termParts{
		inf: inf, booksSynced: booksSynced, certs: certMgr, synced: &atomic.Bool{}, log: log,
		webhook:  server.New(r.cfg.Server.Listen, certMgr.WebhookTLS(), r.clock, log.With("component", "https")),
		extender: server.New(r.cfg.Server.ExtenderListen, certMgr.ExtenderTLS(), r.clock, log.With("component", "extender-https")),
	}

	// The defaults in force, which every replica keeps at what the
	// settings file last said that validated (filewatch.Follow).
	t.policy = r.policy
	log.Info("cluster settings in force for this term", "settings", t.policy.Get())
	lookup := slimpod.NewStore(inf.Pods).Get
	t.binder = extender.NewBinder(ctx, extender.BindConfig{Names: r.names, Scheduler: r.scheduler, Policy: t.policy, Wait: r.cfg.Scheduling.BindWait, UnansweredHold: r.cfg.Scheduling.BindUnansweredHold},
		extender.BinderDeps{API: r.api.Core, Books: ledger, Lookup: lookup, Limits: quotas, Fence: term.Fence,
			Events: events.As(corev1.EventTypeNormal, "Binding"), Observe: r.metrics.Bind, Clock: r.clock, Log: log.With("component", "bind")})
	if inf.Claims != nil {
		// What claims hold on a node moved back from DRA is not the
		// extender's to place.
		claimsBooked, err := ledger.WatchClaims(inf.Claims)
		if err != nil {
			return nil, fmt.Errorf("watch DRA claims: %w", err)
		}
		// Complete once the claims listed are booked too; where they do
		// not list in time (Informers.Sync), without them.
		podsAndNodes := t.booksSynced
		t.booksSynced = func() bool { return podsAndNodes() && (!inf.ClaimsSynced() || claimsBooked()) }
		// A claim is checked against the pods as bind charges them, under
		// bind's lock of the namespace.
		pods := func(namespace string) (podmodel.Usage, error) {
			return ledger.NamespaceUsage(namespace, "") // held beyond the slices included
		}
		if err := quotas.CountClaims(inf.Claims, r.admission.ClaimDeviceClass, ledger.SmallestGPUMiB, quota.ClaimDeps{Pods: pods, Lock: t.binder.LockQuotaWithin, Allocated: ledger.ClaimCharge}); err != nil {
			return nil, fmt.Errorf("count claims in quota: %w", err)
		}
	}
	placer := extender.NewPlacer(ledger, t.binder, r.names, t.policy, lookup, events.As(corev1.EventTypeWarning, "Scheduling"), log.With("component", "extender"))
	// A pod refused just before GPUs freed is nudged to be tried again;
	// one that lower-priority pods keep out is preempted for.
	nudge := requeue.New(r.api.Core, term.Fence, r.clock, log.With("component", "requeue"))
	pre := preemptor.New(preemptor.Deps{Choose: placer, Books: ledger, Node: nodeGetter(inf.Nodes), Lookup: lookup, API: r.api.Core, Fence: term.Fence,
		Events: events.As(corev1.EventTypeNormal, "Preemption"), Clock: r.clock, Log: log.With("component", "preemptor")})
	placer.NotifyRefused(func(p *slimpod.Pod) { nudge.Refused(p); pre.Refused(p) })
	placer.NotifyPreemptAsked(pre.Asked)
	go func() { _ = pre.Run(ctx) }()
	placer.NotifyPodRead(r.metrics.PodRead)
	placer.NotifyFiltered(r.metrics.Filtered)
	ledger.NotifyFreed(func() { nudge.Freed(ctx) })

	aq := admissionQuota{quotas, ledger}
	pods := webhook.NewPods(r.admission, r.scheduler, r.names, aq)
	admission := map[string]http.Handler{
		"/webhook":                webhook.NewHTTPHandler(pods, log.With("component", "webhook")),
		"/webhook/claims":         webhook.NewHTTPHandler(webhook.NewClaimPods(pods, claimTemplates{r.api.ClaimTemplates}), log.With("component", "webhook-claims")),
		"/webhook/resourceclaims": webhook.NewHTTPHandler(webhook.NewResourceClaims(aq), log.With("component", "webhook-resourceclaims")),
	}
	r.route(ctx, t, placer, admission)
	t.close = func() {
		t.binder.Wait()
		stopMetrics()
		events.Shutdown()
	}
	return t, nil
}

// claims is the claims client where the apiserver serves resource.k8s.io/v1
// (an informer on a group it does not serve would never sync, and the
// leader would never take traffic); where discovery fails it is assumed
// served, and the informers wait for the apiserver.
func (r *Role) claims() resourcev1client.ResourceClaimsGetter {
	if r.api.Claims == nil || r.api.ClaimsServed == nil {
		return r.api.Claims
	}
	served, err := r.api.ClaimsServed()
	if err != nil {
		r.log.Warn("could not tell whether the apiserver serves DRA claims; counting them in quota", "err", err)
		return r.api.Claims
	}
	if !served {
		r.log.Info("the apiserver serves no resource.k8s.io/v1: DRA claims are not counted in quota")
		return nil
	}
	return r.api.Claims
}

// nodeGetter reads the nodes' informer by name.
func nodeGetter(nodes toolscache.SharedIndexInformer) func(name string) *corev1.Node {
	return func(name string) *corev1.Node {
		obj, ok, err := nodes.GetStore().GetByKey(name)
		if err != nil || !ok {
			return nil
		}
		n, _ := obj.(*corev1.Node)
		return n
	}
}

// extenderConcurrent is how many extender calls are served at once.
const extenderConcurrent = 2048

// route puts the term's handlers and readiness checks on its listeners.
// The extender's verbs answer only kube-scheduler (mutual TLS); the
// webhook answers the apiserver, which checks the caBundle.
func (r *Role) route(ctx context.Context, t *termParts, placer *extender.Placer, admission map[string]http.Handler) {
	for path, h := range map[string]http.Handler{
		"/filter":     extender.FilterHandler(placer),
		"/prioritize": extender.PrioritizeHandler(placer),
		"/bind":       extender.BindHandler(t.binder),
		"/preempt":    extender.PreemptHandler(placer),
	} {
		t.extender.Handle(path, r.metrics.Instrument(path[1:], whileLeading(ctx, t.synced, h)))
	}
	for path, h := range admission {
		t.webhook.Handle(path, r.metrics.Instrument(strings.ReplaceAll(path[1:], "/", "-"), h))
	}
	t.webhook.OnRefused(r.metrics.Refused("webhook"))
	t.extender.OnRefused(r.metrics.Refused("extender"))
	// Only kube-scheduler gets past the extender's handshake, and its
	// binds wait (up to --bind-wait) for a node's pod in flight: a burst
	// holds hundreds of calls, each a parked goroutine. The bound there
	// is against runaway, not against strangers.
	t.extender.AllowConcurrent(extenderConcurrent)
	t.webhook.AddCheck(server.ReadyCheck{Name: "informers", Func: func() error {
		if !t.synced.Load() {
			return errors.New("caches not synced yet")
		}
		return nil
	}})
	t.webhook.AddCheck(server.ReadyCheck{Name: "certificate", Func: t.certs.Ready})
}

// run runs the term's parts. Admission (which writes nothing) and the
// informers behind it run until term.Serving ends, past the term while
// it hands over (on shutdown or a lost Lease); what writes or places
// (certificates, the extender, a hold on an unanswered Binding) stops
// with the term, ctx.
func (t *termParts) run(ctx context.Context, term leader.Term) error {
	g, serving := errgroup.WithContext(term.Serving)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(serving, cancel)()
	g.Go(func() error {
		// The term ending is no failure: an error here would stop
		// admission with it, before the handoff.
		if err := t.certs.Run(ctx); ctx.Err() == nil {
			return err
		}
		return nil
	})
	g.Go(func() error {
		t.inf.Start(serving)
		if err := t.inf.Sync(ctx); err != nil {
			return err
		}
		if !t.inf.ClaimsSynced() {
			t.log.Warn("DRA claims not listed yet (may vgpud's ServiceAccount list and watch resourceclaims?): quota and the books count none until they are")
		}
		if !toolscache.WaitForCacheSync(ctx.Done(), t.booksSynced) {
			return fmt.Errorf("fill the GPU books: %w", ctx.Err())
		}
		t.synced.Store(true)
		// Nor is traffic taken before a serving certificate is loaded: a
		// new term's first Ensure may take seconds (a CA rotation restarts
		// kube-scheduler), and a labelled pod without one fails every
		// handshake ("tls: internal error") while the predecessor could
		// still answer.
		select {
		case <-t.certs.Loaded():
		case <-ctx.Done():
			return fmt.Errorf("load the serving certificate: %w", ctx.Err())
		}
		// Listen only now: a webhook answering from half-filled informers
		// would count quota wrong, wherever the traffic comes from.
		t.log.Info("caches synced and certificate loaded; taking traffic")
		// From the term's end until the handover is done, the apiserver is
		// sent on to the successor connection by connection.
		t.webhook.ReconnectAfter(ctx)
		g.Go(func() error { return t.webhook.Run(serving) })
		g.Go(func() error { return t.extender.Run(ctx) })
		if err := term.Serve(ctx); err != nil {
			return err
		}
		<-serving.Done()
		t.inf.Stop()
		return nil
	})
	return g.Wait()
}

// whileLeading answers 503 until the books are complete, and runs h under
// a context that ends with the request or with leadership, whichever is
// first: a bind outliving the term must not write.
func whileLeading(lead context.Context, synced *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !synced.Load() {
			http.Error(w, "vgpud leader: caches not synced yet; retry", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(lead, cancel)
		defer stop()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
