package cluster

import (
	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/quota"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// admissionQuota is the webhook's quota view: the namespace's quota and
// use from the informers, and from the books the smallest GPU, the least
// a GPU held whole is charged at bind.
type admissionQuota struct {
	*quota.Source
	books *books.Ledger
}

func (q admissionQuota) SmallestGPUMiB() int64 { return q.books.SmallestGPUMiB() }

// NamespaceQuota is the namespace's quota and its pods' use, with what
// the GPUs hold for it beyond their bookings (books.Ledger.HeldCharge),
// as bind counts it.
func (q admissionQuota) NamespaceQuota(namespace string) podmodel.Quota {
	out := q.Source.NamespaceQuota(namespace)
	if !out.Memory.Set && !out.Cores.Set {
		return out
	}
	held := q.books.HeldCharge(namespace)
	out.Memory.Used += held.MemMiB
	out.Cores.Used += int64(held.Cores)
	out.Memory.Held, out.Cores.Held = held.MemMiB, int64(held.Cores)
	return out
}
