package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

const ns = "vgpud-system"

func testConfig(id string) Config {
	return Config{
		LeaseName: "vgpud-leader", LeaseNamespace: ns, Identity: id, PodNamespace: ns,
		// Whole seconds: the Lease stores its duration in seconds.
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	}
}

// withLeaseConcurrency makes the fake clientset reject a Lease update
// whose resourceVersion is stale, as the apiserver does; without it two
// electors can both "win" and the test proves nothing. The check and the
// write happen under one lock, and the verb, not the action's Go type,
// picks the branch: an update is also a CreateAction, so updates used to
// take the create branch, skip the check, and two electors could both
// win.
func withLeaseConcurrency(kube *fake.Clientset) {
	var mu sync.Mutex
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	kube.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "create":
			lease := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			lease.ResourceVersion = "1"
			if err := kube.Tracker().Create(gvr, lease, lease.Namespace); err != nil {
				return true, nil, err
			}
			return true, lease, nil
		case "update":
			lease := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			cur, err := kube.Tracker().Get(gvr, lease.Namespace, lease.Name)
			if err != nil {
				return true, nil, err
			}
			have := cur.(*coordinationv1.Lease).ResourceVersion
			if lease.ResourceVersion != have {
				return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), lease.Name, errors.New("stale resourceVersion"))
			}
			n, _ := strconv.Atoi(have)
			lease.ResourceVersion = strconv.Itoa(n + 1)
			if err := kube.Tracker().Update(gvr, lease, lease.Namespace); err != nil {
				return true, nil, err
			}
			return true, lease, nil
		}
		return false, nil, nil
	})
}

func labelled(t *testing.T, kube *fake.Clientset) []string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Labels[wellknown.LabelRole] == wellknown.RoleLeader {
			out = append(out, p.Name)
		}
	}
	return out
}

// TestThreeElectorsOneLeaderAndHandover runs three replicas on one Lease:
// at every sample at most one pod carries the leader label; the leader
// is the one running the work; cancelling it hands over to another.
func TestThreeElectorsOneLeaderAndHandover(t *testing.T) {
	ids := []string{"vgpud-a", "vgpud-b", "vgpud-c"}
	kube := fake.NewClientset()
	withLeaseConcurrency(kube)
	for _, id := range ids {
		// One pod starts with a stale label from a previous life.
		labels := map[string]string{}
		if id == "vgpud-c" {
			labels[wellknown.LabelRole] = wellknown.RoleLeader
		}
		if _, err := kube.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	var mu sync.Mutex
	leading := map[string]bool{}
	servedUntil := map[string][]string{} // labelled pods when a replica stopped serving
	changes := map[string][]string{}     // how each replica took the Lease
	electors := map[string]*Elector{}
	cancels := map[string]context.CancelFunc{}
	done := map[string]chan struct{}{}
	for _, id := range ids {
		ctx, cancel := context.WithCancel(context.Background())
		e := New(testConfig(id), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, log)
		e.OnChange(func(how string) { mu.Lock(); changes[id] = append(changes[id], how); mu.Unlock() })
		finished := make(chan struct{})
		electors[id], cancels[id], done[id] = e, cancel, finished
		go func() {
			defer close(finished)
			_ = e.Run(ctx, func(ctx context.Context, term Term) error {
				if err := term.Serve(ctx); err != nil {
					return err
				}
				mu.Lock()
				leading[id] = true
				t.Logf("%s starts leading at %v", id, time.Now().Format("05.000"))
				mu.Unlock()
				<-ctx.Done()
				mu.Lock()
				leading[id] = false
				t.Logf("%s stops leading at %v", id, time.Now().Format("05.000"))
				mu.Unlock()
				// Admission is served on until a successor carries the label.
				<-term.Serving.Done()
				mu.Lock()
				servedUntil[id] = labelled(t, kube)
				mu.Unlock()
				return nil
			})
		}()
	}
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
		// Each elector logs as its term ends: not after the test has.
		for _, d := range done {
			<-d
		}
	})

	waitLeader := func(exclude string) string {
		var leader string
		if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			// Only a pod that no longer leads (a predecessor handing over,
			// or a stale label from a previous life) may carry the label
			// beside the leader, and only until the leader clears it; two
			// labelled pods that both lead are a split brain.
			got := slices.DeleteFunc(labelled(t, kube), func(id string) bool { return id == exclude })
			if len(got) > 1 {
				mu.Lock()
				var both []string
				for _, id := range got {
					if leading[id] {
						both = append(both, id)
					}
				}
				mu.Unlock()
				if len(both) > 1 {
					t.Fatalf("two leaders labelled at once: %v", both)
				}
				return false, nil
			}
			if len(got) == 1 {
				mu.Lock()
				ok := leading[got[0]]
				mu.Unlock()
				if ok && electors[got[0]].IsLeader() {
					leader = got[0]
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("no leader (other than %q) within 5s; labelled %v", exclude, labelled(t, kube))
		}
		return leader
	}

	first := waitLeader("")
	// Everyone agrees who leads (each has read the Lease the leader holds,
	// so none campaigns until it runs out), and exactly one runs the work.
	for _, id := range ids {
		if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait.ForeverTestTimeout, true,
			func(context.Context) (bool, error) { return electors[id].Leader() == first, nil }); err != nil {
			t.Fatalf("%s sees leader %q, not %s", id, electors[id].Leader(), first)
		}
	}
	mu.Lock()
	n := 0
	for _, v := range leading {
		if v {
			n++
		}
	}
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d replicas run the leader's work", n)
	}
	for id, e := range electors {
		if e.Leader() != first {
			t.Errorf("%s sees leader %q, want %q", id, e.Leader(), first)
		}
	}

	start := time.Now()
	cancels[first]()
	second := waitLeader(first)
	t.Logf("handover %s -> %s in %v", first, second, time.Since(start))
	<-done[first]
	if electors[first].IsLeader() {
		t.Error("old leader still says it leads")
	}
	// Make before break: the old leader served admission until the new
	// one carried the label, and no longer carries its own.
	mu.Lock()
	if got := servedUntil[first]; !slices.Contains(got, second) {
		t.Errorf("%s stopped serving while the labelled pods were %v, before %s took over", first, got, second)
	}
	mu.Unlock()
	if got := labelled(t, kube); len(got) != 1 || got[0] != second {
		t.Errorf("after the handover the labelled pods are %v, want [%s]", got, second)
	}
	// The first created the Lease; the second took it released: a clean
	// handoff, no alarm.
	mu.Lock()
	if fmt.Sprint(changes[first], changes[second]) != "[first] [handoff]" {
		t.Errorf("changes seen: %s %v, %s %v; want first, then handoff", first, changes[first], second, changes[second])
	}
	mu.Unlock()
	// With the Lease released on cancel, the handover must not wait out
	// the lease duration.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("handover took %v", d)
	}
}

// TestNewLeaderClearsLabelOfKilledLeader: a leader killed with SIGKILL
// leaves its label behind; the next leader removes it.
func TestNewLeaderClearsLabelOfKilledLeader(t *testing.T) {
	leaderLabel := map[string]string{wellknown.LabelRole: wellknown.RoleLeader}
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dead", Namespace: ns, Labels: leaderLabel}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "next", Namespace: ns}},
	)
	e := New(testConfig("next"), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	led := make(chan struct{})
	go func() {
		_ = e.Run(ctx, func(ctx context.Context, term Term) error {
			if err := term.Serve(ctx); err != nil {
				return err
			}
			close(led)
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-led:
	case <-ctx.Done():
		t.Fatal("never led")
	}
	if got := labelled(t, kube); len(got) != 1 || got[0] != "next" {
		t.Fatalf("labelled pods %v, want [next]", got)
	}
}

func TestLeadErrorStepsDownAndCampaignsAgain(t *testing.T) {
	kube := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: ns}})
	e := New(testConfig("solo"), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	runs := 0
	go func() {
		_ = e.Run(ctx, func(ctx context.Context, _ Term) error {
			mu.Lock()
			runs++
			mu.Unlock()
			return context.DeadlineExceeded // the work failed
		})
	}()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return runs >= 2, nil
	}); err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("lead ran %d times; after failing it must campaign again", runs)
	}
}

func TestRunWithoutOwnPodStillLeads(t *testing.T) {
	kube := fake.NewClientset()
	e := New(testConfig("outside"), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	led := make(chan struct{})
	go func() {
		_ = e.Run(ctx, func(ctx context.Context, term Term) error {
			if err := term.Serve(ctx); err != nil {
				return err
			}
			close(led)
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-led:
	case <-ctx.Done():
		t.Fatal("a replica without a pod object never led")
	}
}

// The fence holds while this replica leads and fails once it does not:
// after the term ends, and as soon as the last renewal is too old for the
// hold to be certain, before another replica could take the Lease.
func TestFence(t *testing.T) {
	kube := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: ns}})
	e := New(testConfig("solo"), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	terms := make(chan Term, 1)
	ended := make(chan struct{})
	leadCtx, stop := context.WithCancel(ctx)
	go func() {
		_ = e.Run(leadCtx, func(ctx context.Context, term Term) error {
			terms <- term
			<-ctx.Done()
			close(ended)
			return nil
		})
	}()
	var term Term
	select {
	case term = <-terms:
	case <-ctx.Done():
		t.Fatal("never led")
	}
	if err := term.Fence(); err != nil {
		t.Fatalf("fence while leading: %v", err)
	}
	stop()
	<-ended
	if err := term.Fence(); err == nil {
		t.Fatal("fence held after the term ended")
	}
}

func TestFencedLockExpiresBeforeOthersCanTakeOver(t *testing.T) {
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	l := &fencedLock{Interface: nopLock{}, identity: "me", now: func() time.Time { return now }}
	if err := l.check(time.Second); err == nil {
		t.Fatal("fence held before any renewal")
	}
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2900 * time.Millisecond)
	if err := l.check(time.Second); err != nil {
		t.Fatalf("2.9 s after a 4 s renewal: %v", err)
	}
	now = now.Add(200 * time.Millisecond)
	if err := l.check(time.Second); err == nil {
		t.Fatal("3.1 s after a 4 s renewal, with 1 s margin, the fence still held")
	}
	_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 4})
	_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: ""}) // released
	if err := l.check(time.Second); err == nil {
		t.Fatal("fence held after the Lease was released")
	}
}

// nopLock accepts every write.
type nopLock struct{ resourcelock.Interface }

func (nopLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (nopLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return nil }

// recordLock returns whatever record it holds.
type recordLock struct {
	nopLock
	r resourcelock.LeaderElectionRecord
}

func (l *recordLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r := l.r
	return &r, nil, nil
}

// Another holder seen while this replica's hold was certain is a Lease
// taken out of turn: reported once, and the fence drops at once. Seen
// after the hold ran out, or after a release, it is a normal takeover.
func TestFencedLockReportsALeaseTakenOutOfTurn(t *testing.T) {
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	inner := &recordLock{}
	var taken []string
	l := &fencedLock{Interface: inner, identity: "me", now: func() time.Time { return now },
		taken: func(by string, early time.Duration) { taken = append(taken, fmt.Sprintf("%s %v", by, early)) }}
	_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 15})
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	if _, _, err := l.Get(context.Background()); err != nil || len(taken) != 0 {
		t.Fatalf("own record: %v %v", err, taken)
	}
	now = now.Add(5 * time.Second)
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "intruder"}
	_, _, _ = l.Get(context.Background())
	_, _, _ = l.Get(context.Background())
	if fmt.Sprint(taken) != "[intruder 10s]" {
		t.Fatalf("taken %v, want one report 10 s early", taken)
	}
	if err := l.check(0); err == nil {
		t.Fatal("fence held after the Lease was taken")
	}
	// A takeover after the hold ran out is no report.
	taken = nil
	_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 15})
	now = now.Add(16 * time.Second)
	inner.r = resourcelock.LeaderElectionRecord{HolderIdentity: "successor"}
	_, _, _ = l.Get(context.Background())
	if len(taken) != 0 {
		t.Fatalf("normal takeover reported: %v", taken)
	}
}

// Just after a takeover the apiserver's policy may not see this replica's
// hold yet and refuse its leader label: it labels again, and leads.
func TestServeLabelsAgainWhileTheApiserverCatchesUp(t *testing.T) {
	kube := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: ns}})
	refusals := 2
	kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if refusals > 0 {
			refusals--
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "solo", errors.New("only the replica holding the vgpud-leader Lease labels a pod leader"))
		}
		return false, nil, nil
	})
	e := New(testConfig("solo"), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := e.serve(context.Background()); err != nil {
		t.Fatalf("serve: %v", err)
	}
	p, err := kube.CoreV1().Pods(ns).Get(context.Background(), "solo", metav1.GetOptions{})
	if err != nil || p.Labels[wellknown.LabelRole] != wellknown.RoleLeader || refusals != 0 {
		t.Fatalf("label %v (%v), %d refusals left", p.Labels, err, refusals)
	}
}

// The Event a Lease taken out of turn makes is one the apiserver takes:
// a name of its own (a generateName ending in a dot is refused), on the
// Lease, naming the taker.
func TestLeaseTakenEvent(t *testing.T) {
	kube := fake.NewClientset()
	var created *eventsv1.Event
	kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		created = a.(k8stesting.CreateAction).GetObject().(*eventsv1.Event)
		return false, nil, nil
	})
	e := New(testConfig("old"), kube.CoordinationV1(), kube.CoreV1(), clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.EventsTo(kube.EventsV1())
	e.postTaken("intruder")
	if created == nil {
		t.Fatal("no Event")
	}
	if errs := validation.IsDNS1123Subdomain(created.Name); len(errs) > 0 || created.GenerateName != "" {
		t.Fatalf("Event name %q (generateName %q): %v", created.Name, created.GenerateName, errs)
	}
	if created.Regarding.Kind != "Lease" || created.Reason != "LeaseTakenOutOfTurn" || !strings.Contains(created.Note, "intruder") {
		t.Fatalf("Event %+v", created)
	}
}
