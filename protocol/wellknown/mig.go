package wellknown

import (
	"regexp"
	"slices"
	"strings"
)

// The per-profile MIG resources are NVIDIA's device plugin's "mixed"
// strategy: one extended resource per MIG profile, named after the GPU
// resource's domain ("nvidia.com/mig-1g.5gb"), so that a pod written for
// that plugin runs here unchanged.

// migProfileName is what a profile must look like to name a resource:
// the name part of a qualified name, which has no '+' ("1g.10gb+me" has
// no resource).
var migProfileName = regexp.MustCompile(`^[0-9a-z]([0-9a-z.-]{0,38}[0-9a-z])?$`)

// MIGPrefix is the start of every per-profile MIG resource: the GPU
// resource's domain and "/mig-"; "" where the GPU resource has no domain.
func (r ResourceNames) MIGPrefix() string {
	domain, _, ok := strings.Cut(r.GPU, "/")
	if !ok || domain == "" {
		return ""
	}
	return domain + "/mig-"
}

// IsMIGResource reports whether name is a per-profile MIG resource. It
// allocates nothing: the leader asks it of every pod event.
func (r ResourceNames) IsMIGResource(name string) bool {
	domain, _, ok := strings.Cut(r.GPU, "/")
	if !ok || domain == "" || !strings.HasPrefix(name, domain) {
		return false
	}
	return strings.HasPrefix(name[len(domain):], "/mig-")
}

// MIGResource names profile's resource; "" where the profile cannot name
// one.
func (r ResourceNames) MIGResource(profile string) string {
	prefix := r.MIGPrefix()
	if prefix == "" || !migProfileName.MatchString(profile) {
		return ""
	}
	return prefix + profile
}

// MIGProfileOf reads the profile a resource name asks for; ok is false
// for a name that is not a per-profile MIG resource.
func (r ResourceNames) MIGProfileOf(name string) (profile string, ok bool) {
	prefix := r.MIGPrefix()
	if prefix == "" || !strings.HasPrefix(name, prefix) {
		return "", false
	}
	return name[len(prefix):], true
}

// ValidMIGProfile reports whether profile can name a resource.
func ValidMIGProfile(profile string) bool { return migProfileName.MatchString(profile) }

// MIGProfiles are the profiles whose resources vgpud's scheduler is
// configured for (managedResources in manifests/vgpud.yaml): kube-
// scheduler sends a pod to the extender only for a resource listed
// there, so a profile outside the list is refused at create. Each is a
// whole GPU instance: NVIDIA's published profiles of the A30, A100 40 and
// 80 GB, H100 80, 94 and 96 GB, H200 141 GB and B200, and those go-nvml's
// mock H200 renders (3g.88gb, 4g.88gb).
func MIGProfiles() []string {
	return []string{
		"1g.5gb", "1g.6gb", "1g.10gb", "1g.12gb", "1g.18gb", "1g.20gb", "1g.23gb", "1g.24gb", "1g.35gb", "1g.45gb",
		"2g.10gb", "2g.12gb", "2g.20gb", "2g.24gb", "2g.35gb", "2g.45gb",
		"3g.20gb", "3g.40gb", "3g.47gb", "3g.48gb", "3g.71gb", "3g.88gb", "3g.90gb",
		"4g.20gb", "4g.24gb", "4g.40gb", "4g.47gb", "4g.48gb", "4g.71gb", "4g.88gb", "4g.90gb",
		"7g.40gb", "7g.80gb", "7g.94gb", "7g.96gb", "7g.141gb", "7g.180gb",
	}
}

// KnownMIGProfile reports whether profile is among MIGProfiles.
func KnownMIGProfile(profile string) bool { return slices.Contains(MIGProfiles(), profile) }
