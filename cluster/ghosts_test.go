package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpud/vgpud/cluster/cache"
	"github.com/vgpud/vgpud/cluster/pods"
	"github.com/vgpud/vgpud/protocol"
)

// record is what the leader's informer stores for p.
func recordOf(p *corev1.Pod) *pods.Pod { return pods.Of(p, protocol.DefaultResourceNames()) }

func assignedPod(name, node string) *corev1.Pod {
	raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: "n1", Containers: []protocol.ContainerAssignment{{Name: "c", GPUs: []protocol.GPUSlice{{UUID: "GPU-0", MemoryMiB: 1000}}}}})
	if err != nil {
		panic(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "7",
			Annotations: map[string]string{protocol.AnnotationAssignment: raw, protocol.AnnotationPhase: string(protocol.PhaseBound)}},
		Spec:   corev1.PodSpec{SchedulerName: "vgpud-scheduler", NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// A booking whose pod never got a node is cleared after the ghost age,
// with an Event; a bound pod, and a pod recreated under the same name,
// are left alone; without the Lease nothing is written.
func TestGhostSweeperClearsOnlyGhosts(t *testing.T) {
	ghost, running := assignedPod("ghost", ""), assignedPod("running", "n1")
	recreated := assignedPod("recreated", "")
	kube := fake.NewClientset(ghost, running, recreated)
	books := cache.New(protocol.DefaultResourceNames(), "vgpud-scheduler")
	stale := *recreated
	stale.UID = "uid-old"
	for _, p := range []*corev1.Pod{ghost, running, &stale} {
		if err := books.SetPod(recordOf(p)); err != nil {
			t.Fatal(err)
		}
	}
	var events []string
	fenced := errors.New("this replica does not hold the leader Lease")
	var fenceErr error
	g := ghostSweeper{api: kube.CoreV1(), books: books, fence: func() error { return fenceErr }, age: time.Minute,
		events: func(p *corev1.Pod, reason, msg string) { events = append(events, p.Name+" "+reason+": "+msg) },
		now:    func() time.Time { return time.Now().Add(2 * time.Minute) }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	fenceErr = fenced
	g.sweep(context.Background())
	if p, _ := kube.CoreV1().Pods("ns").Get(context.Background(), "ghost", metav1.GetOptions{}); p.Annotations[protocol.AnnotationAssignment] == "" {
		t.Fatal("cleared without the Lease")
	}
	fenceErr = nil
	g.sweep(context.Background())
	for name, wantCleared := range map[string]bool{"ghost": true, "running": false, "recreated": false} {
		p, err := kube.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cleared := p.Annotations[protocol.AnnotationAssignment] == ""; cleared != wantCleared {
			t.Errorf("%s: cleared %v, want %v", name, cleared, wantCleared)
		}
	}
	if len(events) != 1 || !strings.Contains(events[0], "ghost StaleAssignmentCleared: vgpud cleared the GPUs it assigned on n1") {
		t.Fatalf("events %q", events)
	}
}
