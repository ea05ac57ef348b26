package leader

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// LeaseHolder reads who holds the Lease, for a replica that runs only the
// node role and so never campaigns. Each call is one API read.
type LeaseHolder struct {
	leases          coordinationv1client.LeasesGetter
	namespace, name string
}

// NewLeaseHolder reads the Lease namespace/name.
func NewLeaseHolder(leases coordinationv1client.LeasesGetter, namespace, name string) LeaseHolder {
	return LeaseHolder{leases: leases, namespace: namespace, name: name}
}

// Leader returns the holder's identity, or "" when it cannot be read.
func (h LeaseHolder) Leader() string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l, err := h.leases.Leases(h.namespace).Get(ctx, h.name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// IsLeader is false: this replica does not campaign.
func (LeaseHolder) IsLeader() bool { return false }
