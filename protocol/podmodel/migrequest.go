package podmodel

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// MIGResources lists the per-profile MIG resources (names.MIGResource)
// container c names in its limits or requests, present even as 0,
// sorted, each once.
func MIGResources(c *corev1.Container, names wellknown.ResourceNames) []string {
	prefix := names.MIGPrefix()
	if prefix == "" {
		return nil
	}
	var out []string
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for n := range l {
			if s := string(n); strings.HasPrefix(s, prefix) && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// namesMIG reports whether c names a per-profile MIG resource; it
// allocates nothing.
func namesMIG(c *corev1.Container, names wellknown.ResourceNames) bool {
	for n := range c.Resources.Limits {
		if names.IsMIGResource(string(n)) {
			return true
		}
	}
	for n := range c.Resources.Requests {
		if names.IsMIGResource(string(n)) {
			return true
		}
	}
	return false
}

// migProfile reads the one MIG profile c asks for by its resource, "" for
// none. One instance of one profile: CUDA enumerates one MIG device per
// process.
func migProfile(c *corev1.Container, names wellknown.ResourceNames) (string, error) {
	asked := MIGResources(c, names)
	switch len(asked) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("container %q asks %s; a process sees one MIG device, so ask one profile per container (or split the work across containers)", c.Name, strings.Join(asked, " and "))
	}
	profile, _ := names.MIGProfileOf(asked[0])
	if !wellknown.ValidMIGProfile(profile) {
		return "", fmt.Errorf("container %q asks %s, which names no MIG profile; write one as nvidia-smi mig -lgip lists it, e.g. %s", c.Name, asked[0], names.MIGResource("1g.5gb"))
	}
	if !wellknown.KnownMIGProfile(profile) {
		return "", fmt.Errorf("container %q asks %s, a MIG profile vgpud's scheduler is not configured for; it serves %s", c.Name, asked[0], strings.Join(wellknown.MIGProfiles(), ", "))
	}
	if _, _, err := quantity(c, asked[0], 1, 1); err != nil {
		return "", fmt.Errorf("%w (a process sees one MIG device: ask 1, or split the work across containers)", err)
	}
	return profile, nil
}
