package nodesetup

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The node-setup Lease's timing: a holder that dies mid-restart holds up
// the other nodes for leaseDuration at most.
const (
	leaseDuration = 30 * time.Second
	leaseRenew    = 20 * time.Second
	leaseRetry    = 2 * time.Second
)

// holdLease runs fn while holding the Lease namespace/name as holder,
// waiting for it first (every node's init container starts at once on
// an install) for wait at most, and releases it when fn returns. fn's
// context ends should the hold be lost. Gave up waiting, it names who
// holds the Lease.
func holdLease(ctx context.Context, leases coordinationv1client.LeasesGetter, namespace, name, holder string, wait time.Duration, out io.Writer, fn func(context.Context) error) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: holder},
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Whoever moves state from waiting first wins: the hold (fn runs) or
	// the timer (it gives up). Never both.
	const waiting, holding, gaveUp = 0, 1, 2
	var state atomic.Int32
	result := make(chan error, 1)
	waited := time.Now()
	timer := time.AfterFunc(wait, func() {
		if state.CompareAndSwap(waiting, gaveUp) {
			cancel()
		}
	})
	defer timer.Stop()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   leaseRenew,
		RetryPeriod:     leaseRetry,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				if !state.CompareAndSwap(waiting, holding) {
					return
				}
				fmt.Fprintf(out, "node-setup: holding Lease %s/%s after %s\n", namespace, name, time.Since(waited).Round(time.Millisecond))
				result <- fn(ctx)
				cancel()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("Lease %s/%s: %w", namespace, name, err)
	}
	le.Run(ctx)
	switch state.Load() {
	case holding:
		// fn runs on after a lost hold, its context ended: its error.
		return <-result
	case gaveUp:
		who := "no one it could read"
		getCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer done()
		if l, err := leases.Leases(namespace).Get(getCtx, name, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
			who = fmt.Sprintf("%q (renewed %v)", *l.Spec.HolderIdentity, l.Spec.RenewTime)
		}
		return fmt.Errorf("waited %s for the Lease %s/%s, held by %s: each node's setup holds it only while it restarts its runtime", wait, namespace, name, who)
	default:
		return fmt.Errorf("the Lease %s/%s was never held: %w", namespace, name, context.Cause(ctx))
	}
}
