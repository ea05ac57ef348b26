package protocol

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestUsageRoundTripAndBounds(t *testing.T) {
	u := NodeUsage{Mode: "enforce", Taken: time.Unix(100, 0).UTC(),
		Containers:   []ContainerUsage{{Namespace: "t", Pod: "p", Container: "main", GPU: "GPU-a", UsedMiB: 900, SliceMiB: 1000, SMPercent: -1, Cores: 20, Kills: 2}},
		Unattributed: []GPUMemory{{GPU: "GPU-a", UsedMiB: 3000}}}
	s, err := EncodeUsage(u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeUsage(s)
	if err != nil || got.Version != Version || got.Containers[0] != u.Containers[0] || got.Unattributed[0] != u.Unattributed[0] || !got.Taken.Equal(u.Taken) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// A newer node's field is ignored, as every wire value's.
	if _, err := DecodeUsage(strings.Replace(s, `"mode"`, `"future":1,"mode"`, 1)); err != nil {
		t.Errorf("unknown field: %v", err)
	}
	bad := u
	bad.Containers = []ContainerUsage{{UsedMiB: -1}}
	if _, err := EncodeUsage(bad); err == nil {
		t.Error("negative use encoded")
	}
	bad.Containers = make([]ContainerUsage, MaxUsageContainers+1)
	if _, err := EncodeUsage(bad); err == nil {
		t.Error("too many containers encoded")
	}
	if _, err := DecodeUsage(`{"version":1,"mode":"report","containers":[{"usedMiB":-5}]}`); err == nil {
		t.Error("negative use decoded")
	}
	if _, err := DecodeUsage(`{"version":1,"mode":"report","containers":[{"pod":"a\u001b[31mb"}]}`); err == nil {
		t.Error("an escape sequence in a pod name decoded")
	}
	if _, err := DecodeUsage(`{"version":1,"mode":"kill","containers":[]}`); err == nil {
		t.Error("an unknown mode decoded")
	}
	// A claim's name is its namespace's and its own: up to 63 + 1 + 253.
	long := ContainerUsage{Namespace: "t", Pod: "p", Container: "main", GPU: "GPU-a", Claim: strings.Repeat("n", 63) + "/" + strings.Repeat("c", 253), SharedMiB: 4096}
	ok := u
	ok.Containers = []ContainerUsage{long}
	if _, err := EncodeUsage(ok); err != nil {
		t.Errorf("the longest claim name: %v", err)
	}
	long.Claim += "c"
	ok.Containers = []ContainerUsage{long}
	if _, err := EncodeUsage(ok); err == nil {
		t.Error("a claim name past 317 bytes encoded")
	}
}

// Held is what the leader reads: it round-trips, an older node's value
// without it reads as nothing held, and a bad entry is refused.
func TestUsageHeld(t *testing.T) {
	u := NodeUsage{Mode: "enforce", Containers: []ContainerUsage{}, Held: []GPUHeld{{GPU: "GPU-a", MiB: 30000, Full: true, Pods: []HeldPod{{UID: "u1", MiB: 20000}}}}}
	s, err := EncodeUsage(u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeUsage(s)
	if err != nil || len(got.Held) != 1 || !reflect.DeepEqual(got.Held[0], u.Held[0]) {
		t.Fatalf("round trip: %+v, %v", got.Held, err)
	}
	old, err := DecodeUsage(`{"version":1,"mode":"report","containers":[]}`)
	if err != nil || old.Held != nil {
		t.Fatalf("an older node's value: %+v, %v", old.Held, err)
	}
	for _, bad := range []string{
		`{"version":1,"mode":"report","containers":[],"held":[{"gpu":"GPU-a","mib":-1}]}`,
		`{"version":1,"mode":"report","containers":[],"held":[{"gpu":"GPU-a","mib":99999999999}]}`,
		`{"version":1,"mode":"report","containers":[],"held":[{"gpu":"a\u001b[31m","mib":1}]}`,
		// A pod named for more than its GPU holds, or with no UID.
		`{"version":1,"mode":"report","containers":[],"held":[{"gpu":"GPU-a","mib":64,"pods":[{"uid":"u","mib":128}]}]}`,
		`{"version":1,"mode":"report","containers":[],"held":[{"gpu":"GPU-a","mib":64,"pods":[{"uid":"","mib":64}]}]}`,
	} {
		if _, err := DecodeUsage(bad); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}
