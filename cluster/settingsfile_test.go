package cluster

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/cluster/internal/clustermetrics"
	"github.com/vgpud/vgpud/cluster/internal/extender"
	"github.com/vgpud/vgpud/cluster/internal/filewatch"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

func TestWithSettings(t *testing.T) {
	base := DefaultConfig()
	for _, tc := range []struct {
		name, file string
		want       func(Config) bool
		refused    string
	}{
		{"empty", "", func(c Config) bool { return c == base }, ""},
		{"comments only", "# nodePolicy: spread\n", func(c Config) bool { return c == base }, ""},
		{"every key", "version: v1\nnodePolicy: spread\ngpuPolicy: binpack\ndefaultGPUMemPercentage: 50\ndefaultGPUCores: 20\n", func(c Config) bool {
			return c.Scheduling.NodePolicy == podmodel.Spread && c.Scheduling.GPUPolicy == podmodel.Binpack && c.Scheduling.DefaultGPUMemPercentage == 50 && c.Scheduling.DefaultGPUCores == 20 && c.Scheduling.BindWait == base.Scheduling.BindWait
		}, ""},
		{"one key, the rest the flags'", "version: v1\nnodePolicy: spread\n", func(c Config) bool {
			return c.Scheduling.NodePolicy == podmodel.Spread && c.Scheduling.GPUPolicy == base.Scheduling.GPUPolicy
		}, ""},
		{"a bad value, named by its key", "version: v1\nnodePolicy: fastest\n", nil, "nodePolicy: Invalid value: \"fastest\""},
		{"a GPU policy chain", "version: v1\ngpuPolicy: binpack,numa\n", func(c Config) bool { return c.Scheduling.GPUPolicy == "binpack,numa" }, ""},
		{"a chain with no load key", "version: v1\ngpuPolicy: numa\n", nil, "name spread or binpack, optionally chained with numa"},
		{"mutex as the default", "version: v1\ngpuPolicy: mutex,binpack\n", nil, "mutex as the default would hold every GPU alone"},
		{"a chain that contradicts itself", "version: v1\ngpuPolicy: binpack,spread\n", nil, "binpack and spread contradict"},
		{"out of range", "version: v1\ndefaultGPUCores: 101\n", nil, "defaultGPUCores"},
		{"a setting the file does not hold", "version: v1\nbindWait: 1s\n", nil, "unknown field"},
		{"no version, read as v1", "nodePolicy: spread\n", func(c Config) bool { return c.Scheduling.NodePolicy == podmodel.Spread }, ""},
		{"another version", "version: v2\nnodePolicy: spread\n", nil, `version "v2" is not one this vgpud reads; want v1`},
		{"a chain of policies as a string", "version: v1\ngpuPolicy: [binpack]\n", nil, "gpuPolicy"},
		{"not YAML", "version: [\n", nil, "want YAML"},
		{"a key in another case", "version: v1\nNodePolicy: spread\n", nil, "unknown field"},
		{"a key twice, in two cases", "version: v1\nnodePolicy: binpack\nnodepolicy: spread\n", nil, "unknown field"},
		{"a key twice", "version: v1\nnodePolicy: binpack\nnodePolicy: spread\n", nil, "already set"},
		{"a null", "version: v1\nnodePolicy:\n", nil, "nodePolicy is null"},
		{"two documents", "version: v1\n---\nnodePolicy: spread\n", nil, "more than one YAML document"},
		{"one document, marked", "---\nversion: v1\nnodePolicy: spread\n", func(c Config) bool { return c.Scheduling.NodePolicy == podmodel.Spread }, ""},
		{"a number as a string", "version: v1\ndefaultGPUCores: \"20\"\n", nil, "defaultGPUCores"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := base.withSettings([]byte(tc.file))
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v, want it to say %q", err, tc.refused)
				}
				return
			}
			if err != nil || !tc.want(got) {
				t.Fatalf("%+v, %v", got, err)
			}
		})
	}
}

// The leader follows the file as kubelet updates a ConfigMap volume:
// a new ..data directory and the link swapped; a bad value keeps what is
// in force.
func TestWatchSettings(t *testing.T) {
	dir := t.TempDir()
	write := func(gen, body string) {
		d := filepath.Join(dir, gen)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cluster-settings.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(gen, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("gen1", "version: v1\n")
	if err := os.Symlink("..data/cluster-settings.yaml", filepath.Join(dir, "cluster-settings.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Settings.ClusterSettingsFile = filepath.Join(dir, "cluster-settings.yaml")
	reg := prometheus.NewRegistry()
	m := clustermetrics.New(reg)
	policy := extender.NewPolicy(cfg.Scheduling.Defaults())
	r := &Role{cfg: cfg, metrics: m, policy: policy, clock: clock.RealClock{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log, lastErr := slog.New(slog.NewTextHandler(io.Discard, nil)), ""
	loaded := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		filewatch.Follow(ctx, cfg.Settings.ClusterSettingsFile, settingsRecheck, clock.RealClock{}, log, func() {
			r.loadSettings(log, &lastErr)
			loaded <- struct{}{}
		})
		close(done)
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.After(5 * time.Second) // fails, rather than hangs
		for !ok() {
			select {
			case <-loaded:
			case <-deadline:
				t.Fatalf("%s: policy %+v", what, policy.Get())
			}
		}
	}
	<-loaded // the watch is set
	write("gen2", "version: v1\nnodePolicy: spread\n")
	waitFor("spread applied", func() bool { return policy.Get().NodePolicy == podmodel.Spread })
	write("gen3", "version: v1\nnodePolicy: fastest\n")
	waitFor("the bad value refused", func() bool {
		return loads(t, reg, "refused") == 1
	})
	if policy.Get().NodePolicy != podmodel.Spread {
		t.Fatalf("a refused file changed the policy: %+v", policy.Get())
	}
	write("gen4", "version: v1\n")
	waitFor("back to the flags", func() bool { return policy.Get().NodePolicy == podmodel.Binpack })
	if got := loads(t, reg, "applied"); got != 2 {
		t.Errorf("%v applied, want 2", got)
	}
	cancel()
	<-done
}

// loads reads vgpud_cluster_settings_loads_total{outcome} from reg.
func loads(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "vgpud_cluster_settings_loads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
