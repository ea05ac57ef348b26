package setting

import "testing"

func TestInvalidNamesTheFlagAndShowsAnEmptyValue(t *testing.T) {
	if got := Invalid("split", 0, "want 1..1000").Error(); got != "--split=0 is invalid: want 1..1000" {
		t.Errorf("got %q", got)
	}
	if got := Invalid("listen", "", "want an address").Error(); got != `--listen="" is invalid: want an address` {
		t.Errorf("got %q", got)
	}
}
