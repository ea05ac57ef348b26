// Package protocol is the versioned wire format between vgpud's node role and
// its cluster role: the names of the resources and annotations, and the JSON
// codecs for the node inventory and the pod assignment.
//
// It is pure: no client-go, no clock, no I/O. Decoding never panics and
// returns an error that names what is wrong, so a corrupt annotation is
// reported instead of silently read as "no GPUs".
package protocol
