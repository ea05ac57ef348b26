package extender

import "errors"

// Why a bind did not bind, as the metrics count it. A refusal is the
// pod's own doing (its namespace's quota, a pod changed or recreated
// under the bind, a request vgpud will not bind); kube-scheduler retries
// it and nothing in vgpud is wrong. A failure is vgpud's or the
// cluster's: the node's room went meanwhile, the node's previous pod was
// not allocated in time, this replica no longer leads, the apiserver
// failed or did not answer.
const (
	BindBound   = "bound"
	BindRefused = "refused"
	BindFailed  = "failed"

	ReasonBound        = "bound"
	ReasonQuota        = "quota"
	ReasonPodChanged   = "pod_changed"
	ReasonNotBindable  = "not_bindable"
	ReasonNoLongerFits = "no_longer_fits"
	ReasonNodeBusy     = "node_busy"
	ReasonInProgress   = "in_progress"
	ReasonNotLeader    = "not_leader"
	// ReasonMisconfigured: the pod is another scheduler's, though only
	// vgpud's profile binds through vgpud: its --scheduler-name and the
	// profile's name disagree.
	ReasonMisconfigured = "misconfigured"
	ReasonUnanswered    = "unanswered"
	ReasonAPIError      = "api_error"
)

// BindReasons are every outcome and reason a bind is counted under, so
// that the metrics start each at 0.
var BindReasons = map[string][]string{
	BindBound:   {ReasonBound},
	BindRefused: {ReasonQuota, ReasonPodChanged, ReasonNotBindable},
	BindFailed:  {ReasonNoLongerFits, ReasonNodeBusy, ReasonInProgress, ReasonNotLeader, ReasonMisconfigured, ReasonUnanswered, ReasonAPIError},
}

// reasoned is a bind's error with the reason it is counted under.
type reasoned struct {
	reason string
	err    error
}

func (r reasoned) Error() string { return r.err.Error() }
func (r reasoned) Unwrap() error { return r.err }

// because marks err with reason; nil stays nil.
func because(reason string, err error) error {
	if err == nil {
		return nil
	}
	return reasoned{reason: reason, err: err}
}

// outcomeOf is how a bind that returned err is counted: an error no
// step marked is the apiserver's.
func outcomeOf(err error) (outcome, reason string) {
	if err == nil {
		return BindBound, ReasonBound
	}
	reason = ReasonAPIError
	var r reasoned
	if errors.As(err, &r) {
		reason = r.reason
	}
	for _, refused := range BindReasons[BindRefused] {
		if reason == refused {
			return BindRefused, reason
		}
	}
	return BindFailed, reason
}
