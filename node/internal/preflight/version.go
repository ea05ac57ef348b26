package preflight

import (
	"fmt"
	"regexp"
	"strconv"
)

// The first releases whose NRI has the default validator: before them
// a validator's settings are read and ignored, and nothing fails closed.
var validatorSince = map[string][2]int{RuntimeContainerd: {2, 2}, RuntimeCRIO: {1, 34}}

var runtimeVersion = regexp.MustCompile(`^(containerd|cri-o)://v?([0-9]+)\.([0-9]+)`)

// WithRuntimeVersion judges v again with the runtime's version as its
// node reports it (status.nodeInfo.containerRuntimeVersion, e.g.
// containerd://2.1.4): a runtime older than its validator fails open
// whatever its files say. An unreadable version leaves v as it is.
func WithRuntimeVersion(v Verdict, version string) Verdict {
	m := runtimeVersion.FindStringSubmatch(version)
	if m == nil {
		return v
	}
	kind := map[string]string{"containerd": RuntimeContainerd, "cri-o": RuntimeCRIO}[m[1]]
	major, _ := strconv.Atoi(m[2])
	minor, _ := strconv.Atoi(m[3])
	since := validatorSince[kind]
	if major > since[0] || (major == since[0] && minor >= since[1]) {
		return v
	}
	v.Result, v.Scope = FailsOpen, ""
	v.Problems = append(v.Problems, fmt.Sprintf("the node runs %s, whose NRI has no default validator (it came in %s %d.%d): containers are created while vgpud's hook is away whatever the files say; upgrade the runtime", version, kind, since[0], since[1]))
	return v
}
