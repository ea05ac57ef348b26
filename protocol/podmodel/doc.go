// Package podmodel is vgpud's one model of a pod, shared by both roles:
// which containers a pod has and when each holds its GPUs (kind.go), what
// each asks of vgpud (request.go), and what the pod holds once its
// containers are summed by Kubernetes' own rule for effective requests
// (usage.go, placement.go). The webhook, the leader's books, bind-time
// quota, the node role and `vgpud inspect` all read pods through it.
//
// It is pure: no client-go calls, no clock, no I/O.
package podmodel
