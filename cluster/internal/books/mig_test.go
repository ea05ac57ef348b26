package books

import (
	"testing"

	"github.com/vgpud/vgpud/protocol"
)

func migInventory() protocol.Inventory {
	return protocol.Inventory{
		GPUs: []protocol.GPU{{UUID: "GPU-s", Index: 0, MemoryMiB: 23034, Cores: 100, Split: 10, Healthy: true}},
		MIG: []protocol.MIGGPU{{UUID: "GPU-m", Index: 1, Model: "A100", MemoryMiB: 40960, SMs: 98, Healthy: true, Instances: []protocol.MIGInstance{
			{UUID: "MIG-a", Profile: "3g.20gb", MemoryMiB: 19968, SMs: 42, Start: 0, Size: 4},
			{UUID: "MIG-b", Profile: "1g.5gb", MemoryMiB: 4864, SMs: 14, Start: 4, Size: 1},
		}}},
	}
}

// HAMi's record names a MIG instance by its GPU's UUID: vgpud books every
// instance of that GPU, so none of them is placed on under the pod.
func TestHAMiRecordOnAMIGGPUHoldsEveryInstance(t *testing.T) {
	gpus, mig := migInventory().Bookable()
	a, err := BookableHAMi("n1", "n1", "GPU-m[1-0],NVIDIA,4864,15:GPU-s,NVIDIA,1000,10:;", gpus, mig)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range a.Containers[0].GPUs {
		got = append(got, s.UUID)
		if s.UUID != "GPU-s" && (!s.MIG || s.Cores == 0) {
			t.Errorf("slice %+v: want an instance held whole", s)
		}
	}
	if len(got) != 3 || got[0] != "MIG-a" || got[1] != "MIG-b" || got[2] != "GPU-s" {
		t.Errorf("booked %v, want both instances and the shared GPU", got)
	}
}
