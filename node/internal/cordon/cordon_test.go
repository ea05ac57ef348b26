package cordon

import (
	"fmt"
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

// A node serving DRA claims taints what the cordon names, a GPU in MIG
// mode too, and every GPU where the cordon cannot be read.
func TestCordonedForDeviceTaints(t *testing.T) {
	inv := protocol.Inventory{GPUs: []protocol.GPU{{UUID: "GPU-a", Index: 0}, {UUID: "GPU-b", Index: 1}}, MIG: []protocol.MIGGPU{{UUID: "GPU-m", Index: 2}}}
	w := New(nil, "n1", nil)
	for _, tc := range []struct {
		cordon map[string]string
		want   string
	}{
		{nil, "map[]"},
		{map[string]string{wellknown.AnnotationCordon: "1,2"}, "map[GPU-b:true GPU-m:true]"},
		{map[string]string{wellknown.AnnotationCordon: "every"}, "map[GPU-a:true GPU-b:true GPU-m:true]"},
	} {
		w.now = tc.cordon
		if got := fmt.Sprint(w.Cordoned(inv)); got != tc.want {
			t.Errorf("cordon %v: %s; want %s", tc.cordon, got, tc.want)
		}
	}
}
