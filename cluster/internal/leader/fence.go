package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fencedLock is the Lease lock that also remembers until when this
// replica's hold is certain: a renewal written at time t keeps every other
// replica out until t + the lease duration, since they can take the Lease
// only after seeing it unrenewed that long. Writes made as the leader
// check it first (Term.Fence), so a leader that froze, lost the network
// or was replaced commits nothing from stale books.
type fencedLock struct {
	resourcelock.Interface
	identity string
	now      func() time.Time

	// taken is called when another replica holds the Lease while this
	// one's hold was still certain: no legitimate candidate takes a Lease
	// before it has gone unrenewed a whole lease duration, so someone
	// wrote it out of turn (with vgpud's identity, which every replica
	// has). Nil: nobody is told.
	taken func(by string, early time.Duration)
	// changed is called when a write makes this replica the holder: with
	// the record read just before, or existed false for a new Lease. Nil:
	// nobody is told.
	changed func(prev resourcelock.LeaderElectionRecord, existed bool)

	mu         sync.Mutex
	validUntil time.Time
	won        bool // a write naming this replica the holder landed
	// seen is the record last read or written; nil before any, or when
	// none exists.
	seen *resourcelock.LeaderElectionRecord
	// taking is a write that would make this replica the holder in place
	// of another, until it is known to have landed (then told to changed)
	// or not: a write whose answer was lost may have landed.
	taking *takeover
}

// takeover is the record a write naming this replica replaces.
type takeover struct {
	prev    resourcelock.LeaderElectionRecord
	existed bool
}

// tell passes t to changed; call without l.mu.
func (l *fencedLock) tell(t *takeover) {
	if t != nil && l.changed != nil {
		l.changed(t.prev, t.existed)
	}
}

// Get reads the Lease, noticing when it was taken out of turn.
func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	l.mu.Lock()
	var landed *takeover
	switch {
	case err == nil && r != nil:
		seen := *r
		l.seen = &seen
		if r.HolderIdentity == l.identity {
			landed = l.taking // a takeover whose answer was lost landed
		}
		l.taking = nil
	case apierrors.IsNotFound(err):
		l.seen, l.taking = nil, nil
	}
	l.mu.Unlock()
	l.tell(landed)
	if err != nil || r == nil || r.HolderIdentity == "" || r.HolderIdentity == l.identity {
		return r, raw, err
	}
	l.mu.Lock()
	until := l.validUntil
	early := until.Sub(l.now())
	if early > 0 {
		l.validUntil = time.Time{} // reported once; and the hold is gone
	}
	l.mu.Unlock()
	if early > 0 && l.taken != nil {
		l.taken(r.HolderIdentity, early)
	}
	return r, raw, err
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, r, l.Interface.Create)
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, r, l.Interface.Update)
}

func (l *fencedLock) write(ctx context.Context, r resourcelock.LeaderElectionRecord, do func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	start := l.now()
	l.mu.Lock()
	if r.HolderIdentity == l.identity && l.taking == nil && (l.seen == nil || l.seen.HolderIdentity != l.identity) {
		l.taking = &takeover{}
		if l.seen != nil {
			l.taking.prev, l.taking.existed = *l.seen, true
		}
	}
	l.mu.Unlock()
	err := do(ctx, r)
	l.mu.Lock()
	var landed *takeover
	switch {
	case err != nil:
		// The write may or may not have landed; the last certain hold
		// stands, and a takeover is told once a read shows it landed.
	case r.HolderIdentity == l.identity:
		l.validUntil = start.Add(time.Duration(r.LeaseDurationSeconds) * time.Second)
		l.won = true
		landed, l.taking = l.taking, nil
		rec := r
		l.seen = &rec
	default:
		l.validUntil = time.Time{} // released
		l.taking = nil
		rec := r
		l.seen = &rec
	}
	l.mu.Unlock()
	l.tell(landed)
	return err
}

// wonOnce reports whether this lock ever wrote this replica in as the
// holder: client-go then starts OnStartedLeading, on its own goroutine.
func (l *fencedLock) wonOnce() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.won
}

// check returns nil while the hold is certain for at least margin more.
func (l *fencedLock) check(margin time.Duration) error {
	l.mu.Lock()
	until := l.validUntil
	l.mu.Unlock()
	if until.IsZero() {
		return errors.New("this replica does not hold the leader Lease")
	}
	if left := until.Sub(l.now()); left < margin {
		return fmt.Errorf("this replica's hold on the leader Lease is not certain any more (%v left, %v needed): another replica may lead", left.Round(time.Millisecond), margin)
	}
	return nil
}

// Term is one term of leadership as the cluster role sees it.
type Term struct {
	// Serving outlives the term's own context, on a planned shutdown and
	// on a loss alike: the role answers admission (which writes nothing)
	// until a successor carries the leader label, or handoverWait.
	Serving context.Context
	// Serve puts the leader label on this replica's pod, so the Service
	// routes traffic here: call it once the role is ready to answer.
	Serve func(ctx context.Context) error
	// Fence returns nil while this replica still certainly holds the
	// Lease; call it before every write made as the leader.
	Fence func() error
}
