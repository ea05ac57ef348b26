package main

import "testing"

// The replica runs on one P unless GOMAXPROCS says otherwise; an empty
// GOMAXPROCS is Go's own default too, so it is unset.
func TestDaemonMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{nil, 1},
		{map[string]string{"GOMAXPROCS": ""}, 1},
		{map[string]string{"GOMAXPROCS": "4"}, 0},
		{map[string]string{"GOMEMLIMIT": "100MiB"}, 1},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if got := daemonMaxProcs(lookup); got != tc.want {
			t.Errorf("environment %v: GOMAXPROCS set to %d, want %d (0: left alone)", tc.env, got, tc.want)
		}
	}
}
