//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/vgpud/vgpud/scripts/harness"
)

// timeline records, from a watch on one namespace, when each pod was
// first seen bound to a node and first seen Running: the status's own
// timestamps have whole seconds, too coarse for a burst of seconds.
type timeline struct {
	mu             sync.Mutex
	created        map[string]time.Time
	bound, running map[string]time.Time
	stop           context.CancelFunc
	done           chan struct{}
	watchErr       error
	namespace      string
}

// watchTimeline starts the watch; call markCreated as each create
// returns and summary once every pod runs.
func (e env) watchTimeline(t *testing.T, ns string) *timeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// From a list's version: a watch from "" on a namespace made a
	// moment ago can be refused as too new for the watch cache.
	list, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("list pods in %s: %v", ns, err)
	}
	w, err := e.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatalf("watch pods in %s: %v", ns, err)
	}
	tl := &timeline{created: map[string]time.Time{}, bound: map[string]time.Time{}, running: map[string]time.Time{},
		stop: cancel, done: make(chan struct{}), namespace: ns}
	go func() {
		defer close(tl.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() != nil {
					return // summary stopped it
				}
				tl.mu.Lock()
				tl.watchErr = fmt.Errorf("watch on %s: %v", ns, ev.Object)
				tl.mu.Unlock()
				return
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			tl.mu.Lock()
			if _, seen := tl.bound[p.Name]; !seen && p.Spec.NodeName != "" {
				tl.bound[p.Name] = now
			}
			if _, seen := tl.running[p.Name]; !seen && p.Status.Phase == corev1.PodRunning {
				tl.running[p.Name] = now
			}
			tl.mu.Unlock()
		}
	}()
	t.Cleanup(tl.close)
	return tl
}

func (tl *timeline) close() {
	tl.stop()
	<-tl.done
}

func (tl *timeline) markCreated(name string) {
	tl.mu.Lock()
	tl.created[name] = time.Now()
	tl.mu.Unlock()
}

// summary says, for the pods named, the median and the worst of
// create to bound and of bound to Running, and the span from the first
// create to the last Running.
func (tl *timeline) summary(names []string) (string, error) {
	// The list that saw every pod Running can be ahead of the watch's
	// last events: let the watch catch up before it stops, unless it
	// ended on its own.
	caughtUp := harness.Poll(30*time.Second, func() error {
		err := tl.missing(names)
		select {
		case <-tl.done:
			if err != nil {
				return fmt.Errorf("%w, and the watch ended", err)
			}
		default:
		}
		return err
	})
	tl.close()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.watchErr != nil {
		return "", tl.watchErr
	}
	if caughtUp != nil {
		return "", caughtUp
	}
	var toBind, toRun []time.Duration
	var first, lastCreated, last time.Time
	for _, n := range names {
		c, b, r := tl.created[n], tl.bound[n], tl.running[n]
		toBind = append(toBind, b.Sub(c))
		toRun = append(toRun, r.Sub(b))
		if first.IsZero() || c.Before(first) {
			first = c
		}
		if c.After(lastCreated) {
			lastCreated = c
		}
		if r.After(last) {
			last = r
		}
	}
	q := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("median %v, max %v", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	return fmt.Sprintf("%s: creates took %v; create -> bound %s; bound -> Running %s; first create -> last Running %v",
		tl.namespace, lastCreated.Sub(first).Round(time.Millisecond), q(toBind), q(toRun), last.Sub(first).Round(time.Millisecond)), nil
}

// missing names the first of names whose create, bind or Running the
// timeline lacks.
func (tl *timeline) missing(names []string) error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, n := range names {
		c, b, r := tl.created[n], tl.bound[n], tl.running[n]
		if c.IsZero() || b.IsZero() || r.IsZero() {
			return fmt.Errorf("%s/%s: created %v, bound %v, Running %v: the watch missed a step", tl.namespace, n, c, b, r)
		}
	}
	return nil
}

// kubeletPods reads how many pods node's kubelet runs a sandbox for,
// through the apiserver's proxy.
func (e env) kubeletPods(node string) (int, error) {
	raw, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy/metrics").DoRaw(context.Background())
	if err != nil {
		return 0, fmt.Errorf("kubelet metrics of %s: %w", node, err)
	}
	pods, ok, err := harness.MetricSums(bytes.NewReader(raw), "kubelet_running_pods", nil)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("kubelet of %s reports no kubelet_running_pods", node)
	}
	return int(pods[""]), nil
}

// settle waits until node's kubelet runs a sandbox for no pod but those
// the apiserver has on node and not deleted: pods deleted before, even
// forcibly, are torn down, not only gone from the apiserver. It waits
// too for vgpud's replica there to be past its start-up, its binary's
// start-up pages handed back (internal/exepages, 30 s in): the code it
// runs next is read back then, once, and a set that met it would carry
// that one-time cost (a first run that did read 1.26, its next two 1.03
// and 0.97).
func (e env) settle(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	harness.Eventually(t, 2*time.Minute, "vgpud on "+node+" past its start-up", func() error {
		p, err := e.vgpudPod(node)
		if err != nil {
			return err
		}
		raw, err := e.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("logs of %s: %w", p.Name, err)
		}
		if !bytes.Contains(raw, []byte("start-up pages")) {
			return fmt.Errorf("%s has not handed its start-up pages back yet", p.Name)
		}
		return nil
	})
	harness.Eventually(t, 2*time.Minute, node+"'s kubelet running only the pods the apiserver has there", func() error {
		pods, err := e.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		live := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("%s/%s being deleted", p.Namespace, p.Name)
			}
			if p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning {
				live++
			}
		}
		running, err := e.kubeletPods(node)
		if err != nil {
			return err
		}
		if running > live {
			return fmt.Errorf("kubelet runs %d pods, the apiserver has %d there", running, live)
		}
		return nil
	})
	t.Logf("%s settled: %v", node, time.Since(start).Round(time.Millisecond))
}

// drain deletes ns's pods as a user would, with their grace, and
// waits until node has settled.
func (e env) drain(t *testing.T, ns, node string) {
	t.Helper()
	if err := e.kube.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the pods of %s: %v", ns, err)
	}
	e.settle(t, node)
}

// burst creates n pods in ns on node, one after another, and waits
// until all run: how long that took, their names, and their timeline.
func (e env) burst(t *testing.T, ns, node string, n int, limits func(i int) map[string]string) (names []string, took time.Duration, line string) {
	t.Helper()
	tl := e.watchTimeline(t, ns)
	start := time.Now()
	for i := range n {
		p := gpuPod(fmt.Sprintf("pod-%02d", i), limits(i), nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		if _, err := e.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tl.markCreated(p.Name)
		names = append(names, p.Name)
	}
	e.waitRunning(t, ns, names, 5*time.Minute)
	took = time.Since(start)
	line, err := tl.summary(names)
	if err != nil {
		t.Fatal(err)
	}
	return names, took, line
}
