package gpuuse

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

func TestUsageValueRoundsSortsAndSumsUnattributed(t *testing.T) {
	s := &inspectv1.GPUUse{Mode: "enforce", Containers: []inspectv1.ContainerUse{
		{Namespace: "t", Pod: "small", Container: "main", GPU: "GPU-0", UsedMiB: 95, SliceMiB: 1000, SMPercent: 12, Cores: 20},
		{Namespace: "t", Pod: "big", Container: "main", GPU: "GPU-0", UsedMiB: 2600, SliceMiB: 1000, SMPercent: -1, Cores: 20, Kills: 2, Over: true},
	}, Unattributed: []inspectv1.ProcessUse{{GPU: "GPU-1", PID: 7, UsedMiB: 100}, {GPU: "GPU-0", PID: 8, UsedMiB: 30}, {GPU: "GPU-1", PID: 9, UsedMiB: 100}}}
	u, enc, err := usageValue(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Containers) != 2 || u.Containers[0].Pod != "big" {
		t.Fatalf("containers %+v; want the biggest user first", u.Containers)
	}
	big, small := u.Containers[0], u.Containers[1]
	if big.UsedMiB != 2624 || big.SMPercent != -1 || big.Kills != 2 || !big.Over {
		t.Errorf("big: %+v; want 2600 MiB rounded to 2624, SM unknown kept, 2 kills, over", big)
	}
	if small.UsedMiB != 64 || small.SMPercent != 10 {
		t.Errorf("small: %+v; want 95 MiB as 64, 12 %% SM as 10", small)
	}
	want := []protocol.GPUMemory{{GPU: "GPU-0", UsedMiB: 0}, {GPU: "GPU-1", UsedMiB: 192}}
	if fmt.Sprint(u.Unattributed) != fmt.Sprint(want) {
		t.Errorf("unattributed %+v; want %+v (summed per GPU, rounded down to 64 MiB)", u.Unattributed, want)
	}
	if !u.Taken.IsZero() {
		t.Error("the value carries the sample's time: every sample would differ")
	}
	back, err := protocol.DecodeUsage(enc)
	if err != nil || len(back.Containers) != 2 {
		t.Errorf("encoding does not decode: %v %+v", err, back)
	}
	// Noise below the rounding is no change.
	s.Containers[1].UsedMiB, s.Containers[0].SMPercent = 2610, 11
	if _, again, _ := usageValue(s); again != enc {
		t.Errorf("2600→2610 MiB and 12→11 %% SM changed the value:\n%s\n%s", enc, again)
	}
}

func TestUsageValueStaysWithinTheBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		pod  string
	}{
		{"more containers than a node lists", protocol.MaxUsageContainers + 10, "p"},
		{"long names past the byte bound", 300, strings.Repeat("x", 200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &inspectv1.GPUUse{Mode: "report"}
			for i := range tc.n {
				s.Containers = append(s.Containers, inspectv1.ContainerUse{Namespace: "t", Pod: fmt.Sprintf("%s-%d", tc.pod, i), Container: "main", GPU: "GPU-0", UsedMiB: uint64(64 * (i + 1)), SliceMiB: 100000, Cores: 1})
			}
			u, enc, err := usageValue(s)
			if err != nil {
				t.Fatal(err)
			}
			if len(enc) > protocol.MaxUsageBytes-64 || len(u.Containers) > protocol.MaxUsageContainers {
				t.Errorf("%d bytes, %d containers", len(enc), len(u.Containers))
			}
			if len(u.Containers)+u.Omitted != tc.n || u.Omitted == 0 {
				t.Errorf("%d shown + %d omitted; want %d in all, some omitted", len(u.Containers), u.Omitted, tc.n)
			}
			// The biggest users are the ones shown.
			if last := u.Containers[len(u.Containers)-1]; last.UsedMiB < int64(64*(u.Omitted+1)) {
				t.Errorf("a smaller user (%d MiB) shown while %d were omitted", last.UsedMiB, u.Omitted)
			}
			if _, err := protocol.DecodeUsage(enc); err != nil {
				t.Errorf("the bounded value does not decode: %v", err)
			}
		})
	}
}

// The memory each GPU holds beyond its bookings is published for the
// leader, rounded up: it errs on the side of placing less.
func TestUsageValueHeld(t *testing.T) {
	s := &inspectv1.GPUUse{Mode: "enforce", Containers: []inspectv1.ContainerUse{}, Unattributed: []inspectv1.ProcessUse{},
		GPUs: []inspectv1.HeldOnGPU{{GPU: "GPU-0", HeldMiB: 28000, Pods: []inspectv1.PodHeld{{UID: "u1", Namespace: "a", Pod: "p", MiB: 20000}, {UID: "u2", MiB: 27999}}},
			{GPU: "GPU-1", HeldMiB: 1, Full: true}}}
	u, enc, err := usageValue(s)
	if err != nil {
		t.Fatal(err)
	}
	// Each pod's part rounded up too, never past the GPU's: no names
	// on the wire, the leader has its own.
	want := []protocol.GPUHeld{{GPU: "GPU-0", MiB: 28032, Pods: []protocol.HeldPod{{UID: "u1", MiB: 20032}, {UID: "u2", MiB: 28032}}}, {GPU: "GPU-1", MiB: 64, Full: true}}
	if fmt.Sprint(u.Held) != fmt.Sprint(want) {
		t.Errorf("held %+v; want %+v", u.Held, want)
	}
	if back, err := protocol.DecodeUsage(enc); err != nil || fmt.Sprint(back.Held) != fmt.Sprint(want) {
		t.Errorf("decoded %+v, %v", back.Held, err)
	}
}
