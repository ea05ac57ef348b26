package leader

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// How a replica came to hold the Lease, as the replica that took it
// saw the record it replaced.
const (
	// ChangeFirst: nobody held the Lease before (it created it, or took
	// the empty one the manifest creates).
	ChangeFirst = "first"
	// ChangeHandoff: the previous holder had released it, which only the
	// holder may write (the vgpud-lease policy): a clean handoff, both
	// sides having seen it.
	ChangeHandoff = "handoff"
	// ChangeExpired: the previous holder's hold ran out unrenewed. Its
	// replica crashed, lost the API or was starved, or was kept from
	// renewing; whoever takes such a Lease was not handed it.
	ChangeExpired = "expired"
)

// OnChange calls f each time this replica becomes the Lease's holder,
// with how (ChangeFirst, ChangeHandoff, ChangeExpired); call before Run.
func (e *Elector) OnChange(f func(how string)) { e.onChange = f }

// ChangeOf says how a holder took the Lease from the record prev it
// replaced (existed false: there was none).
func ChangeOf(prev resourcelock.LeaderElectionRecord, existed bool) string {
	switch {
	case !existed || (prev.HolderIdentity == "" && prev.RenewTime.IsZero()):
		// A release writes the time it released at.
		return ChangeFirst
	case prev.HolderIdentity == "":
		return ChangeHandoff
	default:
		return ChangeExpired
	}
}

// holderChanged logs, counts and records this replica taking the Lease.
func (e *Elector) holderChanged(prev resourcelock.LeaderElectionRecord, existed bool) {
	how := ChangeOf(prev, existed)
	if e.onChange != nil {
		e.onChange(how)
	}
	switch how {
	case ChangeHandoff:
		e.log.Info("took the leader Lease its previous holder released", "lease", e.cfg.LeaseNamespace+"/"+e.cfg.LeaseName)
		go e.postEvent(corev1.EventTypeNormal, "LeaseHandedOver", fmt.Sprintf("%s took the leader Lease its previous holder released", e.cfg.Identity))
	case ChangeExpired:
		renewed := "never renewed"
		if !prev.RenewTime.IsZero() {
			renewed = "last renewed " + prev.RenewTime.UTC().Format(time.RFC3339Nano)
		}
		e.log.Warn("took the leader Lease after its holder's hold expired, not from a handoff", "lease", e.cfg.LeaseNamespace+"/"+e.cfg.LeaseName, "previous holder", prev.HolderIdentity, "renewed", renewed)
		go e.postEvent(corev1.EventTypeWarning, "LeaseTakenAfterExpiry", fmt.Sprintf(
			"%s took the leader Lease after %s's hold expired unrenewed (%s, for %ds), not from a handoff: check that %s's pod or node failed; if it did not, something kept it from renewing, and %s's node should be checked",
			e.cfg.Identity, prev.HolderIdentity, renewed, prev.LeaseDurationSeconds, prev.HolderIdentity, e.cfg.Identity))
	}
}
