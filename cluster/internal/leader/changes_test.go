package leader

import (
	"context"
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
