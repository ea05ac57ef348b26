package podmodel

import (
	"strings"
	"testing"
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
		{chain: "binpack,spread", err: "binpack and spread contradict"},
		{chain: "numa,numa", err: `"numa" is named twice`},
		{chain: "topology-aware", err: "topology-aware is not supported yet"},
		{chain: "binpak", err: `unknown policy "binpak": want a comma-separated chain of binpack or spread, and numa`},
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
