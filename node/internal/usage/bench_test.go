package usage

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/node/internal/gpu"
)

// BenchmarkSample is one sample on a node of 8 GPUs and 64 containers,
// one process each, every process a live one on this host: NVML (the
// mock: the driver's own cost is not Go's), /proc attribution, the
// decision. make bench reports it as a share of one core at the default
// 1 s period.
func BenchmarkSample(b *testing.B) {
	lib, err := gpu.Open("fake:8xNVIDIA A100-SXM4-40GB:40960", "bench")
	if err != nil {
		b.Fatal(err)
	}
	m := lib.(*gpu.Mock)
	devs, err := gpu.Discover(lib)
	if err != nil {
		b.Fatal(err)
	}
	containers := NewContainers()
	for i := range 64 {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		uuid := devs[i%8].UUID
		if err := m.SetProcess(uuid, cmd.Process.Pid, 1000, 10); err != nil {
			b.Fatal(err)
		}
		containers.Add(Container{ID: fmt.Sprintf("%064x", i), Namespace: "bench", Pod: fmt.Sprint("p", i), Name: "main", Slices: map[string]Share{uuid: {MemoryBytes: 4000 << 20}}})
	}
	sample := NVMLSampler(lib, devs, nil)
	// What the enforcer remembers is written to a file, as on a node.
	mem, err := LoadMemory(filepath.Join(b.TempDir(), "usage.json"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	e := NewEnforcer(Options{Rules: Rules{Mode: Enforce, Margin: 1 << 30}, Period: time.Second}, sample, containers, Procfs{Root: "/proc"}, nil, mem, nopRecorder{},
		clocktesting.NewFakeClock(time.Unix(0, 0)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if v := e.Step(); len(v.Unattributed) != 64 {
		b.Fatalf("%d of 64 processes sampled", len(v.Unattributed))
	}
	b.ResetTimer()
	for b.Loop() {
		e.Step()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e9*100, "core-%-at-1s")
}

// BenchmarkAttribute is one process's container read from /proc.
func BenchmarkAttribute(b *testing.B) {
	p, pid := Procfs{Root: "/proc"}, os.Getpid()
	for b.Loop() {
		if _, _, err := p.ContainerID(pid); err != nil {
			b.Fatal(err)
		}
	}
}

type nopRecorder struct{}

func (nopRecorder) Sampled(Outcome, time.Duration) {}
func (nopRecorder) Killed(Kill, bool, error)       {}
func (nopRecorder) Ended(End, uint64, int, error)  {}
