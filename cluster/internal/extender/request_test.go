package extender

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// The GPU policy is a chain under vgpud's or HAMi's annotation name; a
// chain without a load key takes the default's; the two names saying
// different things is refused, as is a default that does not parse.
func TestGPUPolicyReadsAChain(t *testing.T) {
	for _, tc := range []struct {
		a    map[string]string
		def  string
		want podmodel.GPUPolicy
		err  string
	}{
		{def: "binpack", want: podmodel.GPUPolicy{Load: podmodel.Binpack}},
		{def: "spread,numa", want: podmodel.GPUPolicy{Load: podmodel.Spread, NUMA: podmodel.NUMATiebreak}},
		{a: map[string]string{protocol.AnnotationGPUPolicyHAMi: "numa"}, def: "binpack", want: podmodel.GPUPolicy{Load: podmodel.Binpack, NUMA: podmodel.NUMAFirst}},
		{a: map[string]string{protocol.AnnotationGPUPolicy: "spread"}, def: "binpack,numa", want: podmodel.GPUPolicy{Load: podmodel.Spread}},
		{a: map[string]string{protocol.AnnotationGPUPolicy: "binpack", protocol.AnnotationGPUPolicyHAMi: " Binpack "}, def: "spread", want: podmodel.GPUPolicy{Load: podmodel.Binpack}},
		{a: map[string]string{protocol.AnnotationGPUPolicy: "numa", protocol.AnnotationGPUPolicyHAMi: "binpack,numa"}, def: "binpack", err: "disagree: keep one"},
		{a: map[string]string{protocol.AnnotationGPUPolicy: "spread", protocol.AnnotationGPUPolicyHAMi: "binpack"}, def: "spread", err: `annotations vgpud.io/gpu-policy="spread" and hami.io/gpu-scheduler-policy="binpack" disagree`},
		{a: map[string]string{protocol.AnnotationGPUPolicyHAMi: "binpack,topology-aware"}, def: "spread", err: `annotation hami.io/gpu-scheduler-policy="binpack,topology-aware": topology-aware is not supported yet`},
		{def: "packed", err: `the cluster's default GPU policy "packed"`},
	} {
		got, err := gpuPolicy(tc.a, tc.def)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v over %q: %v, want error %q", tc.a, tc.def, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v over %q: %+v, %v; want %+v", tc.a, tc.def, got, err, tc.want)
		}
	}
}

func TestNodePolicyNamesMustAgree(t *testing.T) {
	keys := []string{protocol.AnnotationNodePolicy, protocol.AnnotationNodePolicyHAMi}
	if p, err := policy(map[string]string{keys[0]: "spread", keys[1]: "SPREAD"}, podmodel.Binpack, keys...); err != nil || p != podmodel.Spread {
		t.Errorf("agreeing names: %q, %v", p, err)
	}
	if _, err := policy(map[string]string{keys[0]: "spread", keys[1]: "binpack"}, podmodel.Binpack, keys...); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("disagreeing names: %v", err)
	}
	if _, err := policy(map[string]string{keys[1]: "binpack,spread"}, podmodel.Binpack, keys...); err == nil || !strings.Contains(err.Error(), "want binpack or spread") {
		t.Errorf("a node policy chain: %v", err)
	}
}
