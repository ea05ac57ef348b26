package clustermetrics

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpud/vgpud/cluster/internal/books"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// changingBooks has one GPU whose use changes, and a second only while
// second is set.
type changingBooks struct {
	mu     sync.Mutex
	mem    int64
	second bool
}

func (b *changingBooks) Stats() []books.NodeStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	gpus := []books.GPUStats{{GPU: protocol.GPU{UUID: "GPU-0", Model: "A100", MemoryMiB: 40960, Cores: 100, Split: 10, Healthy: true}, Used: podmodel.Usage{MemMiB: b.mem}}}
	if b.second {
		gpus = append(gpus, books.GPUStats{GPU: protocol.GPU{UUID: "GPU-1", Model: "L4", MemoryMiB: 23034, Cores: 100, Split: 10}})
	}
	return []books.NodeStats{{Name: "n1", Serving: true, GPUs: gpus}}
}
func (b *changingBooks) PodCount() int                      { return 0 }
func (b *changingBooks) Charged() map[string]podmodel.Usage { return nil }

// Label pairs kept between scrapes carry each scrape's values, are
// forgotten with their GPU, and hold under scrapes at once.
func TestSharedLabelsFollowTheBooks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	b := &changingBooks{mem: 1000, second: true}
	done := m.Lead(b, nil)
	body := scrape(t, reg)
	kept := func() *cachedPairs {
		m.books.scrape.Lock()
		defer m.books.scrape.Unlock()
		return m.books.labels.pairs[labelKey{"n1", "GPU-0", "A100"}]
	}
	first := kept()
	for _, want := range []string{`vgpud_gpu_allocated_memory_mib{node="n1",uuid="GPU-0"} 1000`, `vgpud_gpu_healthy{model="L4",node="n1",uuid="GPU-1"} 0`} {
		if !strings.Contains(body, want) {
			t.Fatalf("first scrape lacks %q", want)
		}
	}
	b.mu.Lock()
	b.mem, b.second = 2000, false
	b.mu.Unlock()
	var wg sync.WaitGroup
	bodies := make([]string, 4)
	for i := range bodies {
		wg.Go(func() { bodies[i] = scrape(t, reg) })
	}
	wg.Wait()
	for _, body := range bodies {
		if !strings.Contains(body, `vgpud_gpu_allocated_memory_mib{node="n1",uuid="GPU-0"} 2000`) ||
			!strings.Contains(body, `vgpud_gpu_capacity_slots{model="A100",node="n1",uuid="GPU-0"} 10`) || strings.Contains(body, "GPU-1") {
			t.Fatalf("a later scrape:\n%s", body)
		}
	}
	m.books.scrape.Lock()
	n := len(m.books.labels.pairs)
	m.books.scrape.Unlock()
	if n != 1 {
		t.Fatalf("%d GPUs' labels kept; want the one the books still list", n)
	}
	if p := kept(); p == nil || first == nil || &p.gpu[0] != &first.gpu[0] {
		t.Fatal("GPU-0's label pairs were built again; want the first scrape's kept")
	}
	// No longer leading: none kept.
	done()
	_ = scrape(t, reg)
	m.books.scrape.Lock()
	n = len(m.books.labels.pairs)
	m.books.scrape.Unlock()
	if n != 0 {
		t.Fatalf("%d GPUs' labels kept after leading; want none", n)
	}
}
