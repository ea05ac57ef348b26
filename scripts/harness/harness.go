// Package harness is what the real-cluster suites share: scripts/e2e
// (vgpud processes against a real kube-apiserver), scripts/e2e/cluster
// (the real cluster) and scripts/bench. Polling, clients, namespaces,
// child processes and parallel work are written once, here.
package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// PollInterval is how often Eventually retries: short enough to time
// failovers and restarts to a tenth of a second, long enough not to load
// the apiserver the suites measure.
const PollInterval = 100 * time.Millisecond

// Getenv returns the named environment variables, failing the test with
// how to run the suite when one is unset.
func Getenv(t testing.TB, how string, names ...string) []string {
	t.Helper()
	out := make([]string, len(names))
	for i, n := range names {
		if out[i] = os.Getenv(n); out[i] == "" {
			t.Fatalf("%s must be set; run through `%s`", strings.Join(names, ", "), how)
		}
	}
	return out
}

// Client is a clientset for kubeconfig allowed qps requests per second
// (burst twice that): the suites create thousands of objects, and
// client-go's default of 5 would take an hour.
func Client(t testing.TB, kubeconfig string, qps int) kubernetes.Interface {
	t.Helper()
	return client(t, kubeconfig, qps, false)
}

// ProtobufClient is Client speaking protobuf, as vgpud, kube-scheduler and
// kubelet do: where the bench stands in for vgpud's API calls, they cost
// the apiserver what vgpud's cost, not JSON's more.
func ProtobufClient(t testing.TB, kubeconfig string, qps int) kubernetes.Interface {
	t.Helper()
	return client(t, kubeconfig, qps, true)
}

func client(t testing.TB, kubeconfig string, qps int, protobuf bool) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = float32(qps), 2*qps
	if protobuf {
		rc.ContentType = "application/vnd.kubernetes.protobuf"
		rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// Eventually retries f every PollInterval until it succeeds or timeout
// passes, and returns the time it took; on timeout it fails the test with
// what and f's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	if err := Poll(timeout, f); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
	return time.Since(start)
}

// Poll retries f every PollInterval until it succeeds or timeout passes;
// it returns f's last error, for callers that count failures instead of
// stopping at the first.
func Poll(timeout time.Duration, f func() error) error {
	start := time.Now()
	for {
		err := f()
		if err == nil || time.Since(start) >= timeout {
			return err
		}
		time.Sleep(PollInterval)
	}
}

// Contains returns an error naming the first of subs that s lacks.
func Contains(s string, subs ...string) error {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return fmt.Errorf("%q does not contain %q", s, sub)
		}
	}
	return nil
}

// Parallel runs f(0..n-1) on workers goroutines and fails the test with
// the first error.
func Parallel(t testing.TB, n, workers int, f func(int) error) {
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

// EnsureNamespace creates a namespace with a default ServiceAccount, for
// an apiserver without a controller-manager to make one (pods need it).
func EnsureNamespace(t testing.TB, kube kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	_, err = kube.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create serviceaccount %s/default: %v", name, err)
	}
}

// Process is a child process whose output goes to a log file; a failing
// test shows the log's tail.
type Process struct {
	Cmd *exec.Cmd
	Log string
}

// Spawn starts args as name; it is killed when the test ends.
func Spawn(t testing.TB, name string, args ...string) *Process {
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
	p := &Process{Cmd: cmd, Log: log}
	t.Cleanup(func() { p.Stop(t) })
	return p
}

// Stop kills the process (once) and, if the test failed, logs its tail.
func (p *Process) Stop(t testing.TB) {
	if p.Cmd.ProcessState != nil {
		return
	}
	_ = p.Cmd.Process.Kill()
	_ = p.Cmd.Wait()
	if t.Failed() {
		b, _ := os.ReadFile(p.Log)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("log %s:\n%s", p.Log, b)
	}
}

// CPUTime is the CPU a process has used so far: the sum of its threads'
// run time from /proc/<pid>/task/*/schedstat, to the nanosecond, where the
// kernel keeps it; else user plus system time from /proc/<pid>/stat, in
// 10 ms ticks, which over a call of a millisecond or two is mostly noise.
// A thread that ended takes its run time with it from the first; Go
// keeps its threads.
func CPUTime(pid int) time.Duration {
	if d, ok := schedCPU(pid); ok {
		return d
	}
	return tickCPU(pid)
}

func schedCPU(pid int) (time.Duration, bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, false
	}
	var sum int64
	for _, task := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // the thread ended meanwhile
			}
			return 0, false
		}
		f := strings.Fields(string(raw))
		if len(f) < 1 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		sum += ns
	}
	return time.Duration(sum), len(tasks) > 0
}

// tickCPU is user plus system time from /proc/<pid>/stat.
func tickCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th, in clock ticks (100/s).
	_, rest, _ := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// Memory reads VmRSS and RssAnon of a process, in MiB.
func Memory(pid int) (rss, anon float64) {
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

// CPUSeconds is the user and system CPU time pid has used so far, or 0.
func CPUSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields after it do not.
	_, rest, ok := strings.Cut(string(raw), ") ")
	if !ok {
		return 0
	}
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ, 100 on Linux
}

// PIDOf is the first process whose command name is comm, or 0.
func PIDOf(comm string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			return pid
		}
	}
	return 0
}
