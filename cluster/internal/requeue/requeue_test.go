package requeue

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// A pod refused just before a booking is dropped is annotated, so
// kube-scheduler tries it again; one refused long before is not.
func TestFreedGPUsNudgeRecentlyRefusedPods(t *testing.T) {
	pending := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ai", UID: ktypes.UID("uid-" + name)}}
	}
	kube := fake.NewClientset(pending("fresh"), pending("stale"))
	clk := clocktesting.NewFakePassiveClock(time.Now())
	r := New(kube.CoreV1(), func() error { return nil }, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.Refused(slimpod.Of(pending("stale"), wellknown.DefaultResourceNames()))
	clk.SetTime(clk.Now().Add(requeueWindow + time.Second))
	r.Refused(slimpod.Of(pending("fresh"), wellknown.DefaultResourceNames()))
	w, err := kube.CoreV1().Pods("ai").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r.Freed(context.Background())
	// The nudge goes out from a goroutine: wait for its write, not a while.
	timeout := time.After(wait.ForeverTestTimeout)
	for nudged := false; !nudged; {
		select {
		case ev := <-w.ResultChan():
			p := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Modified {
				continue
			}
			if p.Name != "fresh" || p.Annotations[wellknown.AnnotationRequeued] == "" {
				t.Fatalf("first write is to %s with %v", p.Name, p.Annotations)
			}
			nudged = true
		case <-timeout:
			t.Fatal("fresh pod never nudged")
		}
	}
	p, _ := kube.CoreV1().Pods("ai").Get(context.Background(), "stale", metav1.GetOptions{})
	if _, ok := p.Annotations[wellknown.AnnotationRequeued]; ok {
		t.Errorf("a pod refused %s before the GPUs freed was nudged", requeueWindow+time.Second)
	}
	// Nudged once: the next freed booking finds nothing to nudge and
	// starts no round.
	r.Freed(context.Background())
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) != 0 {
		t.Errorf("refusals left after the round: %v", r.recent)
	}
}
