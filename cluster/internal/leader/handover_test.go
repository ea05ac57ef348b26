package leader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestLostLeaseServesUntilASuccessorIsLabelled: a leader whose renewals
// fail (starved, or the apiserver slow for it alone) loses the Lease
// without a shutdown. It keeps its label and serves admission until a
// successor carries the label, so the Service never lacks an endpoint.
func TestLostLeaseServesUntilASuccessorIsLabelled(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}},
	)
	var starveA atomic.Bool
	withLeaseConcurrency(kube)
	// Prepended last, so it runs first: once starved, a's writes fail.
	kube.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lease := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if starveA.Load() && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "a" {
			return true, nil, errors.New("timed out")
		}
		return false, nil, nil
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	var (
		mu          sync.Mutex
		servedUntil []string // labelled pods when a stopped serving
	)
	aLeads := make(chan struct{})
	bLeads := make(chan struct{})
	run := func(id string, leads chan struct{}) {
		e := New(testConfig(id), kube.CoordinationV1(), kube.CoreV1(), log)
		wg.Go(func() {
			_ = e.Run(ctx, func(ctx context.Context, term Term) error {
				if err := term.Serve(ctx); err != nil {
					return err
				}
				select {
				case <-leads:
				default:
					close(leads)
				}
				<-ctx.Done()
				<-term.Serving.Done()
				if id == "a" {
					mu.Lock()
					if servedUntil == nil {
						servedUntil = labelled(t, kube)
					}
					mu.Unlock()
				}
				return nil
			})
		})
	}
	run("a", aLeads)
	select {
	case <-aLeads:
	case <-time.After(5 * time.Second):
		t.Fatal("a never led")
	}
	run("b", bLeads)

	starveA.Store(true)
	// From a's loss until b carries the label, some pod is labelled.
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		if got := labelled(t, kube); len(got) == 0 {
			t.Fatal("no pod carries the leader label: the Service has no endpoint")
		}
		select {
		case <-bLeads:
			done = true
		case <-deadline:
			t.Fatalf("b never led; labelled %v", labelled(t, kube))
		case <-time.After(10 * time.Millisecond):
		}
	}
	wait := time.After(5 * time.Second)
	for {
		mu.Lock()
		got := servedUntil
		mu.Unlock()
		if got != nil {
			if !slices.Contains(got, "b") {
				t.Errorf("a stopped serving while the labelled pods were %v, before b took over", got)
			}
			break
		}
		select {
		case <-wait:
			t.Fatal("a serves on long after b took over")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := labelled(t, kube); len(got) != 1 || got[0] != "b" {
		t.Errorf("after the handover the labelled pods are %v, want [b]", got)
	}
	// b hands over to a on cleanup, not waiting out handoverWait.
	starveA.Store(false)
}
