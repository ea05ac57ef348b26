package podmodel

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

func TestSelectorsOf(t *testing.T) {
	s, err := SelectorsOf(map[string]string{wellknown.AnnotationUseGPUType: " A100, H100 ,", wellknown.AnnotationNoUseGPUUUID: "GPU-1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Selectors{UseTypes: []string{"A100", "H100"}, NoUseUUIDs: []string{"GPU-1"}}); !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	entries := make([]string, MaxSelectorEntries)
	for i := range entries {
		entries[i] = fmt.Sprintf("T%d", i)
	}
	if _, err := SelectorsOf(map[string]string{wellknown.AnnotationUseGPUType: strings.Join(entries, ",")}); err != nil {
		t.Fatalf("%d entries refused: %v", MaxSelectorEntries, err)
	}
	for _, k := range SelectorKeys() {
		for _, v := range []string{strings.Join(append(entries, "one-more"), ","), strings.Repeat("x", MaxSelectorBytes+1)} {
			_, err := SelectorsOf(map[string]string{k: v})
			if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), "name fewer") {
				t.Errorf("%s of %d bytes: error %v, want one naming the annotation and what to change", k, len(v), err)
			}
		}
	}
}
