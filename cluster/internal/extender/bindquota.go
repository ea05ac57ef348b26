package extender

import (
	"context"
	"fmt"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// Limits gives a namespace's vGPU ResourceQuota hard limits (cluster/quota).
type Limits interface {
	NamespaceLimits(namespace string) podmodel.Quota
}

// quotaOf is the namespace's vGPU quota, and whether it has one.
func (b *Binder) quotaOf(namespace string) (podmodel.Quota, bool) {
	if b.limits == nil {
		return podmodel.Quota{}, false
	}
	q := b.limits.NamespaceLimits(namespace)
	return q, q.Memory.Set || q.Cores.Set
}

// LockQuota takes the namespace's quota lock when it has a vGPU quota,
// and returns its unlock: binds of the namespace hold it, and so do
// admissions of its DRA claims (LockQuotaWithin).
func (b *Binder) LockQuota(namespace string) func() {
	unlock, _ := b.LockQuotaWithin(context.Background(), namespace)
	return unlock
}

// LockQuotaWithin is LockQuota for an admission, which must answer
// before the apiserver's timeout: it gives up, with ctx's error, once
// ctx ends first, leaving nothing waiting for the lock.
func (b *Binder) LockQuotaWithin(ctx context.Context, namespace string) (unlock func(), err error) {
	if _, ok := b.quotaOf(namespace); !ok {
		return func() {}, nil
	}
	l := b.quotaLock(namespace)
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// quotaLock is the namespace's quota lock: a channel of one, held while
// it holds a value, so that a wait for it can end with a context.
func (b *Binder) quotaLock(namespace string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.quotaLocks[namespace]
	if !ok {
		l = make(chan struct{}, 1)
		b.quotaLocks[namespace] = l
	}
	return l
}

// checkQuota is the authoritative quota check: the namespace's binds are
// serialised (bind holds its lock), and memory is counted in MiB of the
// GPUs actually chosen on node, so gpumem-percentage and whole-card
// requests count in full, and a GPU held exclusively counts its whole
// memory (podmodel.Placement.Charge).
func (b *Binder) checkQuota(pod *slimpod.Pod, pl podmodel.Placement, node fit.Node) error {
	q, ok := b.quotaOf(pod.Namespace)
	if !ok {
		return nil
	}
	used, err := b.books.NamespaceUsage(pod.Namespace, pod.UID)
	if err != nil {
		return fmt.Errorf("pod %s/%s not bound: %w", pod.Namespace, pod.Name, err)
	}
	held := b.books.HeldCharge(pod.Namespace)
	// On top of what the namespace's DRA claims are charged, which the
	// books do not hold (NamespaceLimits).
	q.Memory.Used += used.MemMiB
	q.Cores.Used += int64(used.Cores)
	q.Memory.Held, q.Cores.Held = held.MemMiB, int64(held.Cores)
	charge := pl.Charge(func(uuid string) (protocol.GPU, bool) {
		for _, g := range node.GPUs {
			if g.UUID == uuid {
				return g.GPU, true
			}
		}
		return protocol.GPU{}, false
	})
	if msg := podmodel.CheckQuota(pod.Namespace, q, charge, b.cfg.Names); msg != "" {
		return because(ReasonQuota, fmt.Errorf("pod %s/%s not bound: %s", pod.Namespace, pod.Name, msg))
	}
	return nil
}
