package gpuuse

import "testing"

// The default enforces only where the runtime hook runs: elsewhere no
// container is attributed, so enforcing would kill nothing and say it
// does. A mode set explicitly stays what it says.
func TestAutoForHook(t *testing.T) {
	if got := DefaultOptions().GPUUsage; got != Auto {
		t.Fatalf("default --gpu-usage %q; want %q", got, Auto)
	}
	for _, tc := range []struct {
		set  string
		hook bool
		want string
	}{
		{Auto, true, "enforce"},
		{Auto, false, "report"},
		{"report", true, "report"},
		{"off", true, "off"},
		{"enforce", false, "enforce"},
	} {
		o := DefaultOptions()
		o.GPUUsage = tc.set
		if errs := o.Validate(); len(errs) > 0 {
			t.Errorf("%q: %v", tc.set, errs.ToAggregate())
		}
		if got := o.ForHook(tc.hook).GPUUsage; got != tc.want {
			t.Errorf("%q with the hook %v: %q; want %q", tc.set, tc.hook, got, tc.want)
		}
	}
	o := DefaultOptions()
	o.GPUUsage = "kill"
	if errs := o.Validate(); len(errs) != 1 {
		t.Errorf("--gpu-usage=kill: %v; want one error naming the values", errs)
	}
}
