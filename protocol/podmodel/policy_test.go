package podmodel

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestParseGPUPolicy(t *testing.T) {
	for _, tc := range []struct {
		chain string
		want  GPUPolicy
		err   string
	}{
		{chain: "", want: GPUPolicy{}},
		{chain: "binpack", want: GPUPolicy{Load: Binpack}},
		{chain: " Spread ", want: GPUPolicy{Load: Spread}},
		{chain: "binpack,numa", want: GPUPolicy{Load: Binpack, NUMA: NUMATiebreak}},
		{chain: "NUMA , spread", want: GPUPolicy{Load: Spread, NUMA: NUMAFirst}},
		{chain: "numa", want: GPUPolicy{NUMA: NUMAFirst}},
		{chain: "binpack,", want: GPUPolicy{Load: Binpack}},
		{chain: "mutex", want: GPUPolicy{Mutex: true}},
		{chain: " Mutex, binpack ,numa", want: GPUPolicy{Load: Binpack, NUMA: NUMATiebreak, Mutex: true}},
		{chain: "numa,mutex", want: GPUPolicy{NUMA: NUMAFirst, Mutex: true}},
		{chain: "binpack,spread", err: "binpack and spread contradict"},
		{chain: "numa,numa", err: `"numa" is named twice`},
		{chain: "topology-aware", want: GPUPolicy{Topology: true}},
		{chain: "mutex,binpack,topology-aware,numa", want: GPUPolicy{Load: Binpack, NUMA: NUMATiebreak, Mutex: true, Topology: true}},
		{chain: "binpak", err: `unknown policy "binpak": want a comma-separated chain of binpack or spread, and numa, mutex or topology-aware`},
	} {
		got, err := ParseGPUPolicy(tc.chain)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want error %q", tc.chain, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.chain, got, err, tc.want)
		}
		if back, err := ParseGPUPolicy(got.Or(GPUPolicy{Load: Spread}).String()); err != nil || back != got.Or(GPUPolicy{Load: Spread}) {
			t.Errorf("%q: String %q reads back as %+v, %v", tc.chain, got.String(), back, err)
		}
	}
}

// The GPU policy is a chain under vgpud's or HAMi's annotation name,
// vgpud's winning; a chain without a load key takes the default's; a
// default that does not parse, or a chain over the bound, is refused.
func TestGPUPolicyReadsAChain(t *testing.T) {
	for _, tc := range []struct {
		a    map[string]string
		def  string
		want GPUPolicy
		err  string
	}{
		{def: "binpack", want: GPUPolicy{Load: Binpack}},
		{def: "spread,numa", want: GPUPolicy{Load: Spread, NUMA: NUMATiebreak}},
		{a: map[string]string{wellknown.AnnotationGPUPolicyHAMi: "numa"}, def: "binpack", want: GPUPolicy{Load: Binpack, NUMA: NUMAFirst}},
		{a: map[string]string{wellknown.AnnotationGPUPolicy: "spread"}, def: "binpack,numa", want: GPUPolicy{Load: Spread}},
		{a: map[string]string{wellknown.AnnotationGPUPolicy: "binpack", wellknown.AnnotationGPUPolicyHAMi: " Binpack "}, def: "spread", want: GPUPolicy{Load: Binpack}},
		{a: map[string]string{wellknown.AnnotationGPUPolicy: "numa", wellknown.AnnotationGPUPolicyHAMi: "spread,numa"}, def: "binpack", want: GPUPolicy{Load: Binpack, NUMA: NUMAFirst}},
		{a: map[string]string{wellknown.AnnotationGPUPolicy: "spread", wellknown.AnnotationGPUPolicyHAMi: "topology-aware,what"}, def: "binpack", want: GPUPolicy{Load: Spread}}, // HAMi's not read
		{a: map[string]string{wellknown.AnnotationGPUPolicyHAMi: "spread" + strings.Repeat(" ", 300) + ",mutex"}, def: "binpack", err: "longer than 256 bytes"},
		{a: map[string]string{wellknown.AnnotationGPUPolicyHAMi: "binpack,topology-aware"}, def: "spread", want: GPUPolicy{Load: Binpack, Topology: true}},
		{a: map[string]string{wellknown.AnnotationGPUPolicyHAMi: "binpack,nvlink"}, def: "spread", err: `annotation hami.io/gpu-scheduler-policy="binpack,nvlink": unknown policy "nvlink"`},
		{a: map[string]string{wellknown.AnnotationGPUPolicyHAMi: "mutex"}, def: "binpack,numa", want: GPUPolicy{Load: Binpack, Mutex: true}},
		{def: "packed", err: `the cluster's default GPU policy "packed"`},
	} {
		got, err := GPUPolicyOf(tc.a, tc.def)
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

func TestShadowedPoliciesAreNamed(t *testing.T) {
	a := map[string]string{
		wellknown.AnnotationGPUPolicy: "binpack", wellknown.AnnotationGPUPolicyHAMi: "mutex",
		wellknown.AnnotationNodePolicy: "spread", wellknown.AnnotationNodePolicyHAMi: " Spread ",
	}
	got := Shadowed(a)
	if len(got) != 1 || !strings.Contains(got[0], `annotation hami.io/gpu-scheduler-policy="mutex" is ignored: vgpud.io/gpu-policy="binpack" wins`) {
		t.Fatalf("%q", got)
	}
}
