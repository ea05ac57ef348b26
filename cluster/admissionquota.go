package cluster

import (
	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/cluster/internal/quota"
)

// admissionQuota is the webhook's quota view: the namespace's quota and
// use from the informers, and from the books the smallest GPU, the least
// a GPU held whole is charged at bind.
type admissionQuota struct {
	*quota.Source
	books *books.Ledger
}

func (q admissionQuota) SmallestGPUMiB() int64 { return q.books.SmallestGPUMiB() }
