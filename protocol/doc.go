// Package protocol is the versioned wire format between vgpud's node role and
// its cluster role: the JSON codecs for the node inventory, the pod
// assignment and the node's usage, their versions and features (skew.go),
// and the cordon's value. The names both read are in protocol/wellknown,
// the env a container receives in protocol/containerenv.
//
// It is pure: no client-go, no clock, no I/O. Decoding never panics and
// returns an error that names what is wrong, so a corrupt annotation is
// reported instead of silently read as "no GPUs".
package protocol
