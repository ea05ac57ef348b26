package cordon

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// inspect marks the GPUs the node's cordon names, and says what it
// cannot place or read.
func TestCordonOf(t *testing.T) {
	gpus := []protocol.GPU{{UUID: "GPU-a", Index: 0}, {UUID: "GPU-b", Index: 1}}
	if c, p := cordonOf(map[string]string{wellknown.AnnotationCordon: "5", wellknown.AnnotationCordonHAMi: "GPU-b"}, gpus, nil); c[0] || !c[1] || !strings.Contains(p, "[5], which this node does not have") {
		t.Errorf("cordoned %v, problem %q", c, p)
	}
	if c, p := cordonOf(nil, gpus, nil); c[0] || c[1] || p != "" {
		t.Errorf("no cordon: %v, %q", c, p)
	}
	if c, p := cordonOf(map[string]string{wellknown.AnnotationCordon: "every"}, gpus, nil); c[0] || c[1] || !strings.Contains(p, "the leader places nothing on this node") {
		t.Errorf("unreadable: %v, %q", c, p)
	}
}
