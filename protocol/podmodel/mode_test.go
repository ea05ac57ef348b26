package podmodel

import (
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestGPUModeOf(t *testing.T) {
	for _, tc := range []struct {
		a    map[string]string
		want GPUMode
		err  string
	}{
		{nil, ModeAny, ""},
		{map[string]string{wellknown.AnnotationGPUMode: " MIG "}, ModeMIG, ""},
		{map[string]string{wellknown.AnnotationGPUMode: "shared"}, ModeShared, ""},
		{map[string]string{wellknown.AnnotationGPUModeHAMi: "mig"}, ModeMIG, ""},
		{map[string]string{wellknown.AnnotationGPUModeHAMi: "hami-core"}, ModeShared, ""},
		// vgpud's wins, as for the policies.
		{map[string]string{wellknown.AnnotationGPUMode: "shared", wellknown.AnnotationGPUModeHAMi: "mig"}, ModeShared, ""},
		{map[string]string{wellknown.AnnotationGPUModeHAMi: "mps"}, ModeAny, "no MPS mode"},
		{map[string]string{wellknown.AnnotationGPUMode: "hami-core"}, ModeAny, "want mig or shared"},
		{map[string]string{wellknown.AnnotationGPUModeHAMi: "x"}, ModeAny, "want mig or hami-core"},
	} {
		got, err := GPUModeOf(tc.a)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %q, %v; want %q, %q", tc.a, got, err, tc.want, tc.err)
		}
	}
}

func TestCheckModeOneMIGDevicePerContainer(t *testing.T) {
	cs := []ContainerRequest{{Name: "a", GPUs: 1}, {Name: "b", GPUs: 2}}
	if err := CheckMode(ModeMIG, cs); err == nil || !strings.Contains(err.Error(), `container "b" asks 2 GPUs`) {
		t.Errorf("mig with 2 GPUs in a container: %v", err)
	}
	if err := CheckMode(ModeAny, cs); err != nil {
		t.Errorf("no mode: %v", err)
	}
}
