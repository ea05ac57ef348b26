package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// starvedLeases fails every Lease write of one replica while starved is
// set, its release included, as a leader whose requests time out.
type starvedLeases struct {
	coordinationv1client.LeasesGetter
	starved *atomic.Bool
}

func (s starvedLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return starvedLease{s.LeasesGetter.Leases(namespace), s.starved}
}

type starvedLease struct {
	coordinationv1client.LeaseInterface
	starved *atomic.Bool
}

func (s starvedLease) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if s.starved.Load() {
		return nil, errors.New("timed out")
	}
	return s.LeaseInterface.Update(ctx, l, opts)
}

// TestLostLeaseServesUntilASuccessorIsLabelled: a leader whose renewals
// fail (starved, or the apiserver slow for it alone) loses the Lease
// without a shutdown and cannot release it; the successor takes it once
// it has run out. The old leader's binds stop at the loss (the fence
// fails), but it keeps its label and serves admission until the
// successor carries the label, so the Service never lacks an endpoint.
func TestLostLeaseServesUntilASuccessorIsLabelled(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}},
	)
	withLeaseConcurrency(kube)
	var starveA atomic.Bool
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		// With its pod gone a replica has nobody to hand over to.
		for _, name := range []string{"a", "b"} {
			_ = kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
		wg.Wait()
	})

	var (
		mu          sync.Mutex
		servedUntil []string // labelled pods when a stopped serving
		fenceAfter  error    // a's fence once its term ended
		changes     []string // how each took the Lease, "id how"
	)
	aLeads := make(chan struct{})
	bLeads := make(chan struct{})
	run := func(id string, leases coordinationv1client.LeasesGetter, leads chan struct{}) {
		e := New(testConfig(id), leases, kube.CoreV1(), clock.RealClock{}, log)
		e.OnChange(func(how string) { mu.Lock(); changes = append(changes, id+" "+how); mu.Unlock() })
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
				if id == "a" {
					mu.Lock()
					fenceAfter = term.Fence()
					mu.Unlock()
				}
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
	run("a", starvedLeases{kube.CoordinationV1(), &starveA}, aLeads)
	select {
	case <-aLeads:
	case <-time.After(5 * time.Second):
		t.Fatal("a never led")
	}
	run("b", kube.CoordinationV1(), bLeads)

	starveA.Store(true)
	lost := time.Now()
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
		case <-time.After(5 * time.Millisecond):
		}
	}
	// a could not release the Lease: b waited for it to run out.
	if took := time.Since(lost); took < testConfig("b").LeaseDuration {
		t.Errorf("b led %v after a was starved; a Lease that was not released lasts %v", took, testConfig("b").LeaseDuration)
	}
	wait := time.After(5 * time.Second)
	for {
		mu.Lock()
		got, fence := servedUntil, fenceAfter
		mu.Unlock()
		if got != nil {
			if !slices.Contains(got, "b") {
				t.Errorf("a stopped serving while the labelled pods were %v, before b took over", got)
			}
			if fence == nil {
				t.Error("a's fence held after its term ended: it could still bind")
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
	// b took a Lease nobody handed it: told as such, for an Event, a
	// metric and an alert.
	mu.Lock()
	if fmt.Sprint(changes) != "[a first b expired]" {
		t.Errorf("changes %v, want a first, then b after expiry", changes)
	}
	mu.Unlock()
}

// A replica that may not lead never writes itself into the Lease; one
// that may, leads.
func TestMayLeadGatesTheCampaign(t *testing.T) {
	kube := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "barred", Namespace: ns}})
	cfg := testConfig("barred")
	asked := make(chan struct{}, 64)
	cfg.MayLead = func() error {
		select {
		case asked <- struct{}{}:
		default:
		}
		return errors.New("not among the nodes that may lead")
	}
	clk := clocktesting.NewFakeClock(time.Now())
	e := New(cfg, kube.CoordinationV1(), kube.CoreV1(), clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	led := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx, func(ctx context.Context, term Term) error {
			close(led)
			<-ctx.Done()
			return nil
		})
	}()
	deadline := time.After(4 * time.Second) // fails, rather than hangs
	for i := range 5 {                      // five campaigns refused, a recheck apart
		select {
		case <-asked:
		case <-deadline:
			t.Fatalf("the elector asked whether it may lead %d times; want 5", i)
		}
		for !clk.HasWaiters() {
			runtime.Gosched() // until it waits for the recheck
		}
		clk.Step(mayLeadRecheck)
	}
	if _, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), cfg.LeaseName, metav1.GetOptions{}); err == nil {
		t.Fatal("a replica that may not lead wrote the Lease")
	}
	select {
	case <-led:
		t.Fatal("a replica that may not lead led")
	default:
	}
	cancel()
	<-done
}
