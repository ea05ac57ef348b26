package protocol

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestParseCordon(t *testing.T) {
	gpus := []GPU{{UUID: "GPU-aaaa-1", Index: 0}, {UUID: "GPU-bbbb-2", Index: 1}, {UUID: "GPU-cccc-3", Index: 2}}
	for _, c := range []struct {
		raw      string
		cordoned []bool
		unknown  []string
		err      string
	}{
		{raw: "", cordoned: []bool{false, false, false}},
		{raw: "  ", cordoned: []bool{false, false, false}},
		{raw: "1", cordoned: []bool{false, true, false}},
		{raw: "GPU-bbbb-2, 2", cordoned: []bool{false, true, true}},
		{raw: "gpu-aaaa-1", err: "neither a GPU UUID"},
		{raw: "GPU-a_b", err: "neither a GPU UUID"},
		{raw: "GPU-AAAA-1,7,GPU-dead", cordoned: []bool{true, false, false}, unknown: []string{"GPU-dead", "7"}},
		{raw: "1,,2, ", cordoned: []bool{false, true, true}},
		{raw: "all", err: `"all" is neither`},
		{raw: "1234", err: "neither"},
		{raw: strings.Repeat("1,", 600), err: "over 1024"},
	} {
		cd, err := ParseCordon(c.raw)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.raw, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.raw, err)
			continue
		}
		cordoned, unknown := cd.Resolve(gpus, nil)
		if !reflect.DeepEqual(cordoned, c.cordoned) || !reflect.DeepEqual(unknown, c.unknown) {
			t.Errorf("%q: cordoned %v unknown %v, want %v %v", c.raw, cordoned, unknown, c.cordoned, c.unknown)
		}
	}
}

// HAMi's annotation counts beside vgpud's.
func TestNodeCordonReadsHAMisToo(t *testing.T) {
	gpus := []GPU{{UUID: "GPU-a", Index: 0}, {UUID: "GPU-b", Index: 1}, {UUID: "GPU-c", Index: 2}}
	c, err := NodeCordon(map[string]string{wellknown.AnnotationCordon: "0", wellknown.AnnotationCordonHAMi: "GPU-c"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Resolve(gpus, nil); !reflect.DeepEqual(got, []bool{true, false, true}) {
		t.Errorf("cordoned %v", got)
	}
	if _, err := NodeCordon(map[string]string{wellknown.AnnotationCordonHAMi: "GPU-c;rm"}); err == nil || !strings.Contains(err.Error(), wellknown.AnnotationCordonHAMi) {
		t.Errorf("a bad HAMi cordon: %v", err)
	}
}

// A GPU in MIG mode, cordoned by the UUID nvidia-smi shows, is every
// instance of it.
func TestCordonByAMIGGPUsUUID(t *testing.T) {
	gpus := []GPU{{UUID: "GPU-s", Index: 0}, {UUID: "MIG-a", Index: 1}, {UUID: "MIG-b", Index: 1}}
	c := Cordon{UUIDs: []string{"gpu-m"}}
	got, unknown := c.Resolve(gpus, map[string]*MIGRef{"MIG-a": {GPU: "GPU-m"}, "MIG-b": {GPU: "GPU-m"}})
	if !reflect.DeepEqual(got, []bool{false, true, true}) || len(unknown) != 0 {
		t.Errorf("cordoned %v, unknown %v", got, unknown)
	}
}
