package deviceplugin

import (
	"slices"
	"testing"
)

// The preference takes one free slice of each assigned GPU; notPreferred
// names the assigned GPUs it could not take, for the warning kubelet's
// choice would otherwise leave unexplained until Allocate refuses it.
func TestPreferredAndWhatItMissed(t *testing.T) {
	numa := map[string]int{"GPU-a": 0, "GPU-b": 0, "GPU-c": 1}
	available := []string{"GPU-a-3", "GPU-c-0", "GPU-c-1"} // GPU-b has no free slice
	ids := preferred(available, nil, 2, []string{"GPU-a", "GPU-b"}, numa)
	if len(ids) != 2 || !slices.Contains(ids, "GPU-a-3") {
		t.Fatalf("preferred %v, want GPU-a-3 and one more", ids)
	}
	if got := notPreferred([]string{"GPU-a", "GPU-b"}, ids); !slices.Equal(got, []string{"GPU-b"}) {
		t.Fatalf("notPreferred = %v, want [GPU-b]", got)
	}
	all := preferred([]string{"GPU-a-3", "GPU-b-0"}, nil, 2, []string{"GPU-a", "GPU-b"}, numa)
	if got := notPreferred([]string{"GPU-a", "GPU-b"}, all); got != nil {
		t.Fatalf("notPreferred = %v with both GPUs free (preferred %v)", got, all)
	}
}
