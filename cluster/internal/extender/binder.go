package extender

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Books is the cache as bind needs it.
type Books interface {
	Nodes
	// Book books a as the pod's placement, raw its encoding, and returns
	// the token Release takes; held is this bind's earlier token (0:
	// none). It books nothing (false) over another bind's booking of the
	// pod that is under way.
	Book(pod *slimpod.Pod, a protocol.Assignment, raw string, held uint64) (token uint64, ok bool)
	// Release takes back what Book booked, if it is still that booking
	// and not shown by the API: the books go back to what the API shows.
	Release(uid types.UID, token uint64)
	MarkBound(uid types.UID, node string)
	// InFlight names a pod bound to node and not yet allocated, which a
	// bind there waits for; "" for none, and always where the runtime
	// names pods (NamesPods).
	InFlight(node string, except types.UID) string
	// NamesPods reports whether node's runtime names each container's
	// pod (NRI): its pods need no phase.
	NamesPods(node string) bool
	// InFlightChanged is closed when the node's in-flight pods next change.
	InFlightChanged(node string) <-chan struct{}
	// NamespaceUsage is what the namespace's booked pods, except one, are
	// charged (podmodel.Placement.Charge), or why that is unknown.
	NamespaceUsage(namespace string, except types.UID) (podmodel.Usage, error)
	// HeldCharge is, of NamespaceUsage, what the GPUs hold for the
	// namespace beyond its bookings, for the refusal to say.
	HeldCharge(namespace string) podmodel.Usage
}

// Fence returns nil while this replica may still write as the leader
// (leader.Term.Fence).
type Fence func() error

// BindConfig is what a Binder needs to know besides its dependencies.
type BindConfig struct {
	Names     wellknown.ResourceNames
	Scheduler string        // only pods of this scheduler are bound
	Policy    *Policy       // the cluster-wide defaults in force
	Wait      time.Duration // how long a bind waits for the node's in-flight pod
	// UnansweredHold is how long a Binding that got no answer may still
	// land (cluster.Config.BindUnansweredHold).
	UnansweredHold time.Duration
}

// Binder commits placements: the leader is the only binder, so binds to a
// node are ordered here in memory instead of by an annotation lock, and
// binds in a namespace are serialised for its quota.
type Binder struct {
	api    corev1client.PodsGetter
	books  Books
	lookup PodLookup
	limits Limits
	fence  Fence
	cfg    BindConfig
	events func(pod *corev1.Pod, reason, message string)
	clock  clock.WithTicker
	// term ends with this replica's term as leader: what a bind leaves
	// running (settle) stops with it, as the books it keeps do.
	term     context.Context
	settling sync.WaitGroup // settle calls under way
	closed   bool           // Wait has begun: settle starts no more (mu)
	log      *slog.Logger

	mu         sync.Mutex
	nodeLocks  map[string]*sync.Mutex   // held from the wait for the node to the Binding
	quotaLocks map[string]chan struct{} // bindquota.go
	fitLocks   map[string]*sync.Mutex   // held to fit and book a pod on the node
	queue      bindQueue

	// observe is told of every bind's outcome and reason (bindreason.go)
	// and how long it waited for the node's in-flight pod (metrics).
	observe func(outcome, reason string, waited time.Duration)
}

// BinderDeps are a Binder's dependencies. Lookup, Limits, Fence, Events
// and Observe may be nil: every bind reads the pod from the apiserver, no
// quota, no fencing, no Events or metrics (tests and benchmarks). Clock
// is given, always.
type BinderDeps struct {
	API     corev1client.PodsGetter
	Books   Books
	Lookup  PodLookup
	Limits  Limits
	Fence   Fence
	Events  func(pod *corev1.Pod, reason, message string)
	Observe func(outcome, reason string, waited time.Duration)
	Clock   clock.WithTicker
	Log     *slog.Logger
}

// NewBinder returns a Binder for one term of leadership, which ends with
// term.
func NewBinder(term context.Context, cfg BindConfig, d BinderDeps) *Binder {
	if d.Events == nil {
		d.Events = func(*corev1.Pod, string, string) {}
	}
	if d.Observe == nil {
		d.Observe = func(string, string, time.Duration) {}
	}
	if d.Fence == nil {
		d.Fence = func() error { return nil }
	}
	if d.Lookup == nil {
		d.Lookup = func(string, string) *slimpod.Pod { return nil }
	}
	return &Binder{api: d.API, books: d.Books, lookup: d.Lookup, limits: d.Limits, fence: d.Fence, cfg: cfg, events: d.Events, observe: d.Observe,
		clock: d.Clock, term: term, log: d.Log,
		nodeLocks: map[string]*sync.Mutex{}, quotaLocks: map[string]chan struct{}{}, fitLocks: map[string]*sync.Mutex{}}
}
