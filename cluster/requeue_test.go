package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpud/vgpud/cluster/pods"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/scripts/harness"
)

// A pod refused just before a booking is dropped is annotated, so
// kube-scheduler tries it again; one refused long before is not.
func TestFreedGPUsNudgeRecentlyRefusedPods(t *testing.T) {
	pending := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ai", UID: ktypes.UID("uid-" + name)}}
	}
	kube := fake.NewClientset(pending("fresh"), pending("stale"))
	now := time.Now()
	r := newRequeuer(kube.CoreV1(), func() error { return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.now = func() time.Time { return now }
	r.refused(pods.Of(pending("stale"), protocol.DefaultResourceNames()))
	now = now.Add(requeueWindow + time.Second)
	r.refused(pods.Of(pending("fresh"), protocol.DefaultResourceNames()))
	r.freed(context.Background())
	harness.Eventually(t, 5*time.Second, "fresh pod nudged", func() error {
		p, err := kube.CoreV1().Pods("ai").Get(context.Background(), "fresh", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations[protocol.AnnotationRequeued] == "" {
			return errors.New("not annotated yet")
		}
		return nil
	})
	p, _ := kube.CoreV1().Pods("ai").Get(context.Background(), "stale", metav1.GetOptions{})
	if _, ok := p.Annotations[protocol.AnnotationRequeued]; ok {
		t.Errorf("a pod refused %s before the GPUs freed was nudged", requeueWindow+time.Second)
	}
	// Nudged once: the next freed booking writes nothing more.
	kube.ClearActions()
	r.freed(context.Background())
	time.Sleep(50 * time.Millisecond)
	if n := len(kube.Actions()); n != 0 {
		t.Errorf("%d API calls for no refused pod", n)
	}
}
