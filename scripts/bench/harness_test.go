//go:build bench

// Package bench measures vgpud against a real kube-apiserver (and, for the
// pipeline, a real kube-scheduler): run through `make bench`, which starts
// the apiserver and turns the results into bench/results.md.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type env struct {
	kubeconfig, vgpud, k8sBin, out string
	kube                           kubernetes.Interface
}

func setup(t *testing.T) env {
	t.Helper()
	e := env{kubeconfig: os.Getenv("KUBECONFIG"), vgpud: os.Getenv("VGPUD_BIN"), k8sBin: os.Getenv("VGPUD_K8S_BIN"), out: os.Getenv("VGPUD_BENCH_OUT")}
	if e.kubeconfig == "" || e.vgpud == "" || e.k8sBin == "" || e.out == "" {
		t.Fatal("KUBECONFIG, VGPUD_BIN, VGPUD_K8S_BIN and VGPUD_BENCH_OUT must be set; run through `make bench`")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 1000, 2000
	if e.kube, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	return e
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

func (e env) namespace(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller-manager here: make the default service account by hand.
	if _, err := e.kube.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// process is a child process with its log in a temp file.
type process struct {
	cmd *exec.Cmd
	log string
}

func (e env) spawn(t *testing.T, name string, args ...string) *process {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: log}
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *process) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	if t.Failed() {
		b, _ := os.ReadFile(p.log)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("log %s:\n%s", p.log, b)
	}
}

// memory reads VmRSS and RssAnon of a process, in MiB.
func memory(pid int) (rss, anon float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return rss, anon
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

// parallel runs f(0..n-1) on workers and fails on the first error.
func parallel(t *testing.T, n, workers int, f func(int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		if err = f(); err == nil {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
	return 0
}
