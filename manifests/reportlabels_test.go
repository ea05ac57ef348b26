package manifests

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// vgpud-own-writes lets vgpud write each label of its node's report, by
// name, and no other under vgpud.io/: the node role's labels and the
// policy's list are one.
func TestOwnWritesAllowsTheNodeReportByName(t *testing.T) {
	start := strings.Index(install, "\n  name: vgpud-own-writes\n")
	end := strings.Index(install[start:], "\n---\n")
	if start < 0 || end < 0 {
		t.Fatal("no vgpud-own-writes policy in manifests/vgpud.yaml")
	}
	policy := install[start : start+end]
	list := "['" + strings.Join(append([]string{wellknown.LabelNodeSetup}, wellknown.NodeReportLabels()...), "', '") + "']"
	if !strings.Contains(policy, "variables.kind == 'nodes' && k in "+list) {
		t.Errorf("vgpud-own-writes does not allow exactly the node's labels %s", list)
	}
	if strings.Contains(policy, "startsWith('vgpud.io/") {
		t.Error("vgpud-own-writes allows labels by prefix: an administrator's vgpud.io/ labels are not vgpud's to write")
	}
}
