package extender

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/protocol"
)

// The GPU policy takes HAMi's mutex under either name; the GPUs are then
// chosen among idle ones by the default policy. Anything else is refused
// with the names it may take.
func TestGPUPolicyReadsMutex(t *testing.T) {
	for _, c := range []struct {
		a      map[string]string
		policy string
		mutex  bool
		err    string
	}{
		{a: nil, policy: fit.Spread},
		{a: map[string]string{protocol.AnnotationGPUPolicyHAMi: " Mutex "}, policy: fit.Spread, mutex: true},
		{a: map[string]string{protocol.AnnotationGPUPolicy: "mutex"}, policy: fit.Spread, mutex: true},
		{a: map[string]string{protocol.AnnotationGPUPolicy: "binpack"}, policy: fit.Binpack},
		{a: map[string]string{protocol.AnnotationGPUPolicyHAMi: "mutex,binpack"}, err: "want binpack, spread or mutex"},
	} {
		p, mutex, err := gpuPolicy(c.a, fit.Spread)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %v, want %q", c.a, err, c.err)
			}
			continue
		}
		if err != nil || p != c.policy || mutex != c.mutex {
			t.Errorf("%v: %q %v %v, want %q %v", c.a, p, mutex, err, c.policy, c.mutex)
		}
	}
}
