package fit

import (
	"fmt"
	"testing"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// synthetic builds nodes × 8 GPUs of 80 GB, split 10, with pods already
// placed round-robin (each 1 GPU, 4000 MiB, 10 cores) — a deterministic
// fill. A GPU takes at most 8 of them, leaving a slot, memory and cores
// for the benchmark pod; the rest of the fill is dropped and reported.
func synthetic(nodes, pods int) ([]Node, int) {
	out := make([]Node, nodes)
	for i := range out {
		n := Node{Name: fmt.Sprintf("node-%05d", i), GPUs: make([]CommittedGPU, 8)}
		for g := range n.GPUs {
			n.GPUs[g] = CommittedGPU{GPU: protocol.GPU{UUID: fmt.Sprintf("GPU-%05d-%d", i, g), Index: g, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Cores: 100, Split: 10, NUMA: g / 4, Healthy: true}}
		}
		out[i] = n
	}
	if most := nodes * 8 * 8; pods > most {
		pods = most
	}
	for k := 0; k < pods; k++ {
		g := &out[k%nodes].GPUs[(k/nodes)%8]
		g.Used = g.Used.Plus(podmodel.Usage{MemMiB: 4000, Cores: 10, Slots: 1})
	}
	return out, pods
}

// filterPass is one /filter's and /prioritize's worth of work: Fits of
// req against every node, and Fullness of those that fit, of which there
// must be want.
func filterPass(b *testing.B, cluster []Node, req Request, want int) {
	fit := 0
	for i := range cluster {
		if r := Fits(cluster[i], req, opts); r == nil {
			_ = Fullness(cluster[i])
			fit++
		}
	}
	if fit != want {
		b.Fatalf("%d/%d nodes fit", fit, want)
	}
}

// BenchmarkFilterPass is one /filter's and /prioritize's worth of work:
// Fits and Fullness of a pod asking 1 GPU, 10000 MiB, 20 cores against
// every node.
func BenchmarkFilterPass(b *testing.B) {
	req := Request{Containers: []podmodel.ContainerRequest{{Name: "c", GPUs: 1, HasGPUs: true, MemoryMiB: 10000, Cores: 20}}}
	for _, nodes := range []int{100, 1000, 5000} {
		for _, pods := range []int{0, 10000, 20000} {
			cluster, placed := synthetic(nodes, pods)
			b.Run(fmt.Sprintf("nodes=%d/pods=%d", nodes, pods), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					filterPass(b, cluster, req, nodes)
				}
				// After the loop: b.Loop's first call deletes earlier metrics.
				b.ReportMetric(float64(placed), "placed-pods")
			})
		}
	}
}

// BenchmarkFilterPassChained is BenchmarkFilterPass for a pod whose GPU
// policy chain and binding make fit do the most per node: four GPUs held
// alone, chosen from a connected set on one NUMA node by binpack, numa
// breaking ties (mutex,binpack,topology-aware,numa with numa-bind), on
// nodes whose inventory has an NVLink set of eight and four PCIe pairs,
// with nothing placed yet.
func BenchmarkFilterPassChained(b *testing.B) {
	policy, err := podmodel.ParseGPUPolicy("mutex,binpack,topology-aware,numa")
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"chain", Request{Containers: []podmodel.ContainerRequest{{Name: "c", GPUs: 4, HasGPUs: true, MemoryMiB: 10000, Cores: 20}}, GPUPolicy: policy, SingleNUMA: true}},
		{"chain-init", Request{Containers: []podmodel.ContainerRequest{
			{Name: "init", Kind: podmodel.KindInit, GPUs: 2, HasGPUs: true, MemoryMiB: 1000, Cores: 10},
			{Name: "c", GPUs: 4, HasGPUs: true, MemoryMiB: 10000, Cores: 20}}, GPUPolicy: policy, SingleNUMA: true}},
	} {
		cluster, _ := synthetic(5000, 0)
		sets := []Set{{Link: protocol.LinkNVLink, Mask: 0xff}, {Link: protocol.LinkPCIeSwitch, Mask: 0x03}, {Link: protocol.LinkPCIeSwitch, Mask: 0x0c}, {Link: protocol.LinkPCIeSwitch, Mask: 0x30}, {Link: protocol.LinkPCIeSwitch, Mask: 0xc0}}
		for i := range cluster {
			cluster[i].Features, cluster[i].Sets = protocol.UnderstoodFeatures(), sets
		}
		b.Run(fmt.Sprintf("%s/nodes=5000/pods=0", tc.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				filterPass(b, cluster, tc.req, len(cluster))
			}
		})
	}
}

// BenchmarkFilterPassMIG is BenchmarkFilterPass on 5000 nodes of which
// every fifth has four of its eight GPUs in MIG mode, seven 1g.10gb
// instances each (28 instances, as the books list them, after the four
// shared GPUs), half of them held: a pod that names no mode and one that
// asks MIG, 1 GPU of 8000 MiB.
func BenchmarkFilterPassMIG(b *testing.B) {
	cluster, _ := synthetic(5000, 0)
	for i := 0; i < len(cluster); i += 5 {
		n := &cluster[i]
		n.GPUs = n.GPUs[:4]
		for g := 4; g < 8; g++ {
			for k := range 7 {
				c := CommittedGPU{GPU: protocol.GPU{UUID: fmt.Sprintf("MIG-%05d-%d-%d", i, g, k), Index: g, Model: "NVIDIA H100 80GB HBM3 MIG 1g.10gb", MemoryMiB: 9856, Cores: 15, Split: 1, NUMA: g / 4, Healthy: true},
					MIG: &protocol.MIGRef{GPU: fmt.Sprintf("GPU-%05d-%d", i, g), GPUMemoryMiB: 81920, Profile: "1g.10gb"}}
				if (g*7+k)%2 == 0 {
					c.Used = podmodel.Usage{MemMiB: 9856, Cores: 15, Slots: 1}
				}
				n.GPUs = append(n.GPUs, c)
			}
		}
	}
	for _, mode := range []podmodel.GPUMode{podmodel.ModeAny, podmodel.ModeMIG} {
		req := Request{Containers: []podmodel.ContainerRequest{{Name: "c", GPUs: 1, HasGPUs: true, MemoryMiB: 8000}}, Mode: mode}
		name := string(mode)
		if name == "" {
			name = "any"
		}
		b.Run(fmt.Sprintf("mode=%s/nodes=5000/pods=0", name), func(b *testing.B) {
			b.ReportAllocs()
			want := len(cluster)
			if mode == podmodel.ModeMIG {
				want = len(cluster) / 5
			}
			for b.Loop() {
				filterPass(b, cluster, req, want)
			}
		})
	}
}

// BenchmarkPreemptDecision is the leader's preemption decision over a
// cluster full by memory with slots free: 1000 nodes × 8 GPUs of 80 GB,
// each GPU holding four pods of 18000 MiB (priorities 0-3), and a pod of
// priority 100 asking one GPU of 40000 MiB. Preempt weighs every node;
// the cheapest node wins (two victims of priority 0 and 1 on one GPU).
func BenchmarkPreemptDecision(b *testing.B) {
	const nodes = 1000
	bare := make([]Node, nodes)
	residents := make([][]Resident, nodes)
	for i := range bare {
		n := Node{Name: fmt.Sprintf("node-%05d", i), GPUs: make([]CommittedGPU, 8)}
		for g := range n.GPUs {
			n.GPUs[g] = CommittedGPU{GPU: protocol.GPU{UUID: fmt.Sprintf("GPU-%05d-%d", i, g), Index: g, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Cores: 100, Split: 10, NUMA: g / 4, Healthy: true}}
			for k := 0; k < 4; k++ {
				residents[i] = append(residents[i], Resident{Key: fmt.Sprintf("uid-%d-%d-%d", i, g, k), Priority: int32(k),
					Placement: podmodel.Placement{{Name: "main", GPUs: []protocol.GPUSlice{{UUID: n.GPUs[g].UUID, MemoryMiB: 18000, Cores: 10}}}}})
			}
		}
		bare[i] = n
	}
	req := Request{Containers: []podmodel.ContainerRequest{{Name: "main", GPUs: 1, HasGPUs: true, MemoryMiB: 40000, Cores: 20}}}
	b.ReportAllocs()
	for b.Loop() {
		var best Preemption
		found := false
		for i := range bare {
			if p, ok := Preempt(bare[i], residents[i], nil, 100, req, opts); ok && (!found || p.Better(best)) {
				best, found = p, true
			}
		}
		if !found || len(best.Victims) != 2 || best.Highest != 1 {
			b.Fatalf("best %v, %v; want two victims of priority 0 and 1", best, found)
		}
	}
}
