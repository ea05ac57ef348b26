package webhook

import (
	"testing"

	"github.com/vgpud/vgpud/protocol"
)

func TestPodAskCountsPerGPUAndInitMax(t *testing.T) {
	tests := []struct {
		name       string
		reqs       []protocol.ContainerRequest
		mem, cores int64
	}{
		{"none", nil, 0, 0},
		// Native quota would count 4000 here: the ResourceQuota sees one
		// gpumem value, not one per GPU.
		{"multi-GPU", []protocol.ContainerRequest{{GPUs: 2, MemoryMiB: 4000, Cores: 30}}, 8000, 60},
		{"apps add up", []protocol.ContainerRequest{{GPUs: 1, MemoryMiB: 1000}, {GPUs: 3, MemoryMiB: 1000, Cores: 10}}, 4000, 30},
		{"init larger", []protocol.ContainerRequest{{Init: true, GPUs: 1, MemoryMiB: 9000}, {GPUs: 1, MemoryMiB: 1000, Cores: 50}}, 9000, 50},
		{"percentage not counted", []protocol.ContainerRequest{{GPUs: 1, MemoryPercent: 50}}, 0, 0},
	}
	for _, tt := range tests {
		mem, cores := podAsk(tt.reqs)
		if mem != tt.mem || cores != tt.cores {
			t.Errorf("%s: podAsk = %d MiB, %d cores; want %d, %d", tt.name, mem, cores, tt.mem, tt.cores)
		}
	}
}

func TestCheckQuota(t *testing.T) {
	names := protocol.DefaultResourceNames()
	reqs := []protocol.ContainerRequest{{GPUs: 2, MemoryMiB: 2000, Cores: 25}}
	tests := []struct {
		name string
		q    Quota
		want string
	}{
		{"no quota", Quota{}, ""},
		{"fits exactly", Quota{Memory: Limit{Set: true, Hard: 4000}, Cores: Limit{Set: true, Hard: 150, Used: 100}}, ""},
		{"memory over", Quota{Memory: Limit{Set: true, Hard: 40000, Used: 38000}},
			"namespace ai-team: gpumem quota 40000 MiB, in use 38000, this pod asks 4000; lower nvidia.com/gpumem (counted per GPU times nvidia.com/gpu) or raise the ResourceQuota"},
		{"cores over", Quota{Cores: Limit{Set: true, Hard: 100, Used: 60}},
			"namespace ai-team: gpucores quota 100, in use 60, this pod asks 50; lower nvidia.com/gpucores (counted per GPU times nvidia.com/gpu) or raise the ResourceQuota"},
		{"unset limit ignores usage", Quota{Memory: Limit{Used: 1 << 40}}, ""},
	}
	for _, tt := range tests {
		if got := checkQuota("ai-team", tt.q, reqs, names); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
