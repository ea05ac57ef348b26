package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Each write that makes this replica the holder says how it took the
// Lease, from the record read just before: a renewal says nothing.
func TestFencedLockToldHowTheLeaseWasTaken(t *testing.T) {
	inner := &recordLock{}
	var got []string
	l := &fencedLock{Interface: inner, identity: "me", now: time.Now,
		changed: func(prev resourcelock.LeaderElectionRecord, existed bool) { got = append(got, ChangeOf(prev, existed)) }}
	ctx := context.Background()
	take := func(prev resourcelock.LeaderElectionRecord) {
		inner.r = prev
		_, _, _ = l.Get(ctx)
		_ = l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4})
	}
	// A new Lease: Create without a record read.
	_ = l.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4})
	take(resourcelock.LeaderElectionRecord{HolderIdentity: "me"}) // a renewal
	_ = l.Update(ctx, resourcelock.LeaderElectionRecord{})        // released
	released := resourcelock.LeaderElectionRecord{RenewTime: metav1.Now(), LeaseDurationSeconds: 1}
	take(released) // taken back after a release
	take(resourcelock.LeaderElectionRecord{HolderIdentity: "crashed", LeaseDurationSeconds: 4})
	if want := []string{ChangeFirst, ChangeHandoff, ChangeExpired}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("changes %v, want %v", got, want)
	}
	// The empty Lease the manifest creates has never been held.
	if how := ChangeOf(resourcelock.LeaderElectionRecord{}, true); how != ChangeFirst {
		t.Fatalf("the manifest's empty Lease taken: %s, want %s", how, ChangeFirst)
	}
}

// errLock fails every write, as a write whose answer was lost: it may
// have landed.
type errLock struct{ *recordLock }

func (errLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return errors.New("context deadline exceeded")
}

// A takeover whose answer was lost is told once a read shows it landed,
// and forgotten when a read shows another holder.
func TestFencedLockToldOfATakeoverWhoseAnswerWasLost(t *testing.T) {
	inner := &recordLock{}
	var got []string
	l := &fencedLock{Interface: errLock{inner}, identity: "me", now: time.Now,
		changed: func(prev resourcelock.LeaderElectionRecord, existed bool) { got = append(got, ChangeOf(prev, existed)) }}
	ctx := context.Background()
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "crashed", LeaseDurationSeconds: 4}
	_, _, _ = l.Get(ctx)
	_ = l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4})
	if len(got) != 0 {
		t.Fatalf("told %v before the write was known to land", got)
	}
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4}
	_, _, _ = l.Get(ctx) // it landed
	_, _, _ = l.Get(ctx)
	if len(got) != 1 || got[0] != ChangeExpired {
		t.Fatalf("changes %v, want one %s", got, ChangeExpired)
	}
	// One that did not land is never told.
	got = nil
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "other", LeaseDurationSeconds: 4}
	_, _, _ = l.Get(ctx)
	_ = l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4})
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "third", LeaseDurationSeconds: 4}
	_, _, _ = l.Get(ctx)
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4}
	_, _, _ = l.Get(ctx)
	if len(got) != 0 {
		t.Fatalf("told %v of a write that did not land", got)
	}
}
