//go:build e2e

package cluster

import (
	"bufio"
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeLogs keeps what every vgpud replica logged during the soak, by node,
// across container restarts and rollouts: a violation found at the end of
// a round is often the doing of a replica that a later fault deleted, and
// the namespace dump's log tails no longer hold it.
type nodeLogs struct {
	mu    sync.Mutex
	lines map[string][]string // node -> "pod: line"
}

// followNodeLogs follows the log of every node-role pod there is or will
// be, until ctx ends.
func (e env) followNodeLogs(ctx context.Context) *nodeLogs {
	l := &nodeLogs{lines: map[string][]string{}}
	go func() {
		followed := map[string]bool{} // pod UIDs
		for ctx.Err() == nil {
			pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
			if err == nil {
				for _, p := range pods.Items {
					if !followed[string(p.UID)] && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
						followed[string(p.UID)] = true
						go e.follow(ctx, l, p)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return l
}

// follow streams one pod's log, again after each container restart, until
// the pod is gone; timestamps skip what an earlier stream already gave.
func (e env) follow(ctx context.Context, l *nodeLogs, p corev1.Pod) {
	var last time.Time
	for ctx.Err() == nil {
		opts := &corev1.PodLogOptions{Follow: true, Timestamps: true}
		if !last.IsZero() {
			opts.SinceTime = &metav1.Time{Time: last}
		}
		if stream, err := e.kube.CoreV1().Pods(system).GetLogs(p.Name, opts).Stream(ctx); err == nil {
			sc := bufio.NewScanner(stream)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				stamp, line, _ := strings.Cut(sc.Text(), " ")
				if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
					if !at.After(last) {
						continue
					}
					last = at
				}
				l.add(p.Spec.NodeName, p.Name+": "+line)
			}
			stream.Close()
		}
		got, err := e.kube.CoreV1().Pods(system).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != p.UID) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (l *nodeLogs) add(node, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines[node] = append(l.lines[node], line)
}

// explain logs what vgpud on node said that bears on pod: its warnings and
// errors and every line naming the pod, and the lines of that node's
// kubelet that name the pod.
func (e env) explain(t *testing.T, l *nodeLogs, node, pod string) {
	t.Helper()
	if node == "" {
		t.Logf("%s: no node to read the logs of", pod)
		return
	}
	if l != nil {
		l.mu.Lock()
		var out []string
		for _, line := range l.lines[node] {
			if warning(line) || strings.Contains(line, pod) {
				out = append(out, line)
			}
		}
		l.mu.Unlock()
		t.Logf("vgpud on %s, warnings, errors and lines naming %s (the last 60 of %d):\n%s", node, pod, len(out), strings.Join(last(out, 60), "\n"))
	}
	out, err := exec.Command(e.scripts+"/cluster.sh", "kubelet-log", nodeIndex(node)).Output()
	if err != nil {
		t.Logf("kubelet log of %s: %v", node, err)
		return
	}
	var lines []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, pod) {
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
	}
	t.Logf("kubelet on %s, lines naming %s (the last 40 of %d):\n%s", node, pod, len(lines), strings.Join(last(lines, 40), "\n"))
}

// warning reports whether a log line, in tint's text or slog's JSON, is
// at level WARN or above.
func warning(line string) bool {
	for _, level := range []string{" WRN ", " ERR ", `"level":"WARN"`, `"level":"ERROR"`} {
		if strings.Contains(line, level) {
			return true
		}
	}
	return false
}

func last(lines []string, n int) []string {
	return slices.Clip(lines[max(0, len(lines)-n):])
}
