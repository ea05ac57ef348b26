// Package leader elects the replica that runs the cluster role, on a
// coordination.k8s.io Lease, and marks that replica's pod with
// vgpud.io/role=leader so the vgpud Service routes only to it.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// Config says which Lease to campaign for and how fast.
type Config struct {
	LeaseName      string
	LeaseNamespace string
	Identity       string // this replica's pod name
	PodNamespace   string // where this replica's pod lives (for the label)
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	// MayLead, when set, is asked before each campaign: an error keeps
	// this replica from campaigning (checked again every mayLeadRecheck).
	MayLead func() error
}

// mayLeadRecheck is how often a replica that may not lead asks again:
// the setting is a ConfigMap, which kubelet updates within a minute.
const mayLeadRecheck = 15 * time.Second

// Elector campaigns for the Lease and runs the leader's work while it holds it.
type Elector struct {
	cfg    Config
	leases coordinationv1client.LeasesGetter
	pods   corev1client.PodsGetter
	log    *slog.Logger
	label  *podLabel
	// clock times vgpud's own waits: the fence, the handover, the pause
	// between campaigns. client-go's LeaderElector keeps its own.
	clock clock.WithTicker

	// onTaken is told of a Lease taken out of turn (OnTakenOutOfTurn),
	// and events records it (EventsTo).
	onTaken func(holder, by string)
	// onChange is told how this replica took the Lease (OnChange).
	onChange func(how string)
	events   eventsv1client.EventsGetter

	mu       sync.Mutex
	leader   string
	isLeader bool
}

// OnTakenOutOfTurn calls f when another replica took the Lease while
// this one's hold was still certain; call before Run. Every replica's
// token may write the Lease, so a compromised node can take it: this is
// how that shows (docs/security.md).
func (e *Elector) OnTakenOutOfTurn(f func(holder, by string)) { e.onTaken = f }

func (e *Elector) takenOutOfTurn(by string, early time.Duration) {
	e.log.Error("LEADER LEASE TAKEN OUT OF TURN: another replica holds the Lease while this one's hold was still certain; a node may be compromised",
		"lease", e.cfg.LeaseNamespace+"/"+e.cfg.LeaseName, "holder", e.cfg.Identity, "taken by", by, "hold left", early.Round(time.Millisecond))
	if e.onTaken != nil {
		e.onTaken(e.cfg.Identity, by)
	}
	go e.postTaken(by)
}

// New returns an Elector; nothing happens until Run. clk times vgpud's
// own waits; the Lease's are client-go's.
func New(cfg Config, leases coordinationv1client.LeasesGetter, pods corev1client.PodsGetter, clk clock.WithTicker, log *slog.Logger) *Elector {
	return &Elector{
		cfg:    cfg,
		leases: leases,
		pods:   pods,
		log:    log,
		label:  &podLabel{pods: pods, namespace: cfg.PodNamespace, name: cfg.Identity},
		clock:  clk,
	}
}

// Leader is the identity of the current leader as last observed, "" if unknown.
func (e *Elector) Leader() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader
}

// IsLeader reports whether this replica leads now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.isLeader
}

func (e *Elector) set(leader string, self bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leader, e.isLeader = leader, self
}

// Run campaigns until ctx ends. Each time this replica wins it labels its
// pod and calls lead with a context that ends when leadership is lost;
// losing, or lead returning, releases the Lease and, once the term has
// handed over (handOver), campaigns again. Only lead's context is
// cancelled on loss: the caller's work (the node role) runs on.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, term Term) error) error {
	// A previous process of this pod may have died leading: its label would
	// route traffic here before we have won anything.
	if err := e.label.remove(ctx); err != nil {
		e.log.Warn("clear stale leader label", "err", err)
	}
	var refused string
	for ctx.Err() == nil {
		if e.cfg.MayLead != nil {
			if err := e.cfg.MayLead(); err != nil {
				if err.Error() != refused {
					refused = err.Error()
					e.log.Warn("not campaigning for the Lease", "why", refused)
				}
				select {
				case <-ctx.Done():
				case <-e.clock.After(mayLeadRecheck):
				}
				continue
			}
			refused = ""
		}
		if err := e.campaign(ctx, lead); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-e.clock.After(e.cfg.RetryPeriod):
		}
	}
	return nil
}

func (e *Elector) campaign(ctx context.Context, lead func(ctx context.Context, term Term) error) error {
	lock := &fencedLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metaFor(e.cfg.LeaseNamespace, e.cfg.LeaseName),
			Client:     e.leases,
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
		},
		identity: e.cfg.Identity,
		now:      e.clock.Now,
		taken:    e.takenOutOfTurn,
		changed:  e.holderChanged,
	}
	// The round ends with ctx; a leader's term then outlives it for the
	// handoff (runLeading), and the round waits for that.
	round, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		termDone chan struct{}
	)
	// client-go starts OnStartedLeading on a goroutine and may return
	// before it has run: a round that won waits for the term to start,
	// then to end, or a next round could win while this term still hands
	// over and removes the label the next one put on.
	started := make(chan struct{})
	defer func() {
		if lock.wonOnce() {
			<-started
		}
		mu.Lock()
		done := termDone
		mu.Unlock()
		if done != nil {
			<-done
		}
	}()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.cfg.LeaseName,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				done := make(chan struct{})
				defer close(done)
				mu.Lock()
				termDone = done
				mu.Unlock()
				close(started)
				e.set(e.cfg.Identity, true)
				e.log.Info("became leader", "lease", e.cfg.LeaseNamespace+"/"+e.cfg.LeaseName)
				e.runLeading(ctx, leadCtx, lock, lead)
				// Whatever ended the work, give the Lease up so another
				// replica (or this one, fresh) takes over at once.
				e.dropLabel()
				cancel()
			},
			OnStoppedLeading: func() {
				// The label stays: the handoff (runLeading) removes it once
				// a successor carries one, or after handoverWait.
				e.set("", false)
				e.log.Info("stopped leading")
			},
			OnNewLeader: func(id string) {
				e.set(id, id == e.cfg.Identity)
				if id != e.cfg.Identity {
					e.log.Info("leader observed", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election for lease %s/%s: %w", e.cfg.LeaseNamespace, e.cfg.LeaseName, err)
	}
	le.Run(round)
	return nil
}

// dropLabel removes the leader label with its own deadline: the caller's
// context may be done, and a stale label routes traffic to a replica that
// no longer serves.
func (e *Elector) dropLabel() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.label.remove(ctx); err != nil {
		e.log.Warn("remove leader label", "err", err)
	}
}

// runLeading runs lead for one term. The term ends with ctx: on shutdown
// (process ends: a delete, a rolling update) the Lease is released at
// once; on a loss (a renewal missed its deadline) another replica takes
// it within the lease duration. Either way admission goes on being served
// (term.Serving) until a successor has the label, so no create meets a
// webhook without an endpoint. Dropping the label at a loss would leave
// the Service without one until the successor has built its term.
func (e *Elector) runLeading(process, ctx context.Context, lock *fencedLock, lead func(ctx context.Context, term Term) error) {
	serving, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	var labelled atomic.Bool // Serve put the label on: traffic may come here
	go func() {
		<-ctx.Done()
		why := "Lease lost"
		if process.Err() != nil {
			why = "Lease released"
		}
		if labelled.Load() {
			e.handOver(serving, why)
		}
		stopServing()
	}()
	// The margin covers a write still in flight when the hold runs out:
	// what the renewal deadline leaves of the lease duration.
	margin := e.cfg.LeaseDuration - e.cfg.RenewDeadline
	term := Term{
		Serving: serving,
		Serve: func(ctx context.Context) error {
			err := e.serve(ctx)
			if err == nil {
				labelled.Store(true)
			}
			return err
		},
		Fence: func() error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("leadership ended: %w", err)
			}
			return lock.check(margin)
		},
	}
	if err := lead(ctx, term); err != nil && !errors.Is(err, context.Canceled) {
		e.log.Error("cluster role failed; stepping down", "err", err)
	}
}

// serve labels this replica's pod as the leader, then clears the label of
// any other: a predecessor handing over serves admission until its label
// goes (make before break), and a leader killed with SIGKILL never
// removed its own.
func (e *Elector) serve(ctx context.Context) error {
	err := e.label.set(ctx)
	// The apiserver's vgpud-own-writes policy lets only the Lease holder
	// label itself leader, from its own cache of the Lease: just after a
	// takeover it may not have seen this replica's hold yet.
	for wait := 200 * time.Millisecond; apierrors.IsForbidden(err) && wait <= 3200*time.Millisecond; wait *= 2 {
		e.log.Info("the apiserver does not see this replica's Lease yet; labelling again", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.clock.After(wait):
		}
		err = e.label.set(ctx)
	}
	if err != nil {
		if !apierrors.IsNotFound(err) {
			// Without the label no traffic reaches us; leading on is pointless.
			return fmt.Errorf("label own pod as leader: %w", err)
		}
		// No such pod: a process run outside Kubernetes (a benchmark, a
		// debug session) that no Service routes to anyway.
		e.log.Warn("own pod not found; leading without the leader label", "err", err)
	}
	if err := e.label.clearOthers(ctx); err != nil {
		e.log.Warn("clear the leader label of other replicas", "err", err)
	}
	return nil
}
