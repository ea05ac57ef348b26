package mig

import "testing"

// An A100's 3g placements (0+4, 4+4) and 1g ones (0..6, one slice each):
// with a 3g at 4, a 1g goes first at 0, and none is left beside two 3g.
func TestFirstFree(t *testing.T) {
	three := []Span{{0, 4}, {4, 4}}
	one := []Span{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}
	if p, ok := FirstFree(one, []Span{{4, 4}}); !ok || p != (Span{0, 1}) {
		t.Errorf("1g beside a 3g at 4: %v %v", p, ok)
	}
	if p, ok := FirstFree(one, three); ok {
		t.Errorf("1g beside two 3g: %v", p)
	}
	if !Allowed(Span{4, 4}, three) || Allowed(Span{2, 4}, three) {
		t.Error("Allowed takes only the profile's placements")
	}
	if (Span{0, 4}).Overlaps(Span{4, 1}) || !(Span{3, 2}).Overlaps(Span{4, 4}) {
		t.Error("Overlaps is wrong at the edges")
	}
}
