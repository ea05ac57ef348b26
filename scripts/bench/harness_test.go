//go:build bench

// Package bench measures vgpud against a real kube-apiserver (and, for the
// pipeline, a real kube-scheduler): run through `make bench`, which starts
// the apiserver and turns the results into bench/results.md.
package bench

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vgpud/vgpud/scripts/harness"

	"k8s.io/client-go/kubernetes"
)

type env struct {
	kubeconfig, vgpud, k8sBin, out string
	kube                           kubernetes.Interface
	// proto speaks protobuf: for the API calls the bench makes in vgpud's
	// or a kubelet's place, and its watches during the pipeline.
	proto     kubernetes.Interface
	leaderPID int // the vgpud leader, once spawned
}

func setup(t *testing.T) env {
	t.Helper()
	v := harness.Getenv(t, "make bench", "KUBECONFIG", "VGPUD_BIN", "VGPUD_K8S_BIN", "VGPUD_BENCH_OUT")
	return env{kubeconfig: v[0], vgpud: v[1], k8sBin: v[2], out: v[3], kube: harness.Client(t, v[0], 1000), proto: harness.ProtobufClient(t, v[0], 1000)}
}

// record appends one result row: section, metric, value, target, met.
func (e env) record(t *testing.T, section, metric, value, target string, met string) {
	t.Helper()
	t.Logf("%s | %s | %s | target %s | %s", section, metric, value, target, met)
	f, err := os.OpenFile(e.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%s\t%s\t%s\n", section, metric, value, target, met)
}

func metIf(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// percentile of sorted durations, in ms.
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))].Microseconds()) / 1000
}

func sortDur(d []time.Duration) []time.Duration {
	slices.Sort(d)
	return d
}
