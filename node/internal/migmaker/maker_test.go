package migmaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/mig"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

type rig struct {
	lib     nvml.Interface
	parent  string
	catalog map[string]Slot
	path    string
}

// newRig is one mock H100 80GB in MIG mode with the instances listed
// (the operator's), its catalog of every whole profile, and a record
// path.
func newRig(t *testing.T, instances string) rig {
	t.Helper()
	lib, err := gpu.Open("fake:1xH100-SXM5-80GB:81920:mig="+instances, "n1")
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := gpu.MIGProfiles(lib, devs[0].UUID)
	if err != nil {
		t.Fatal(err)
	}
	cat := Catalog(map[string][]gpu.MIGProfile{devs[0].UUID: ps}, func(string) bool { return true })
	return rig{lib: lib, parent: devs[0].UUID, catalog: cat, path: filepath.Join(t.TempDir(), "mig-made.json")}
}

func (r rig) open(t *testing.T) *Maker {
	t.Helper()
	m, err := Open(r.path, NVML{Lib: r.lib}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (r rig) want(pod string, ids ...string) (map[string]Demand, map[string]string) {
	want, held := map[string]Demand{}, map[string]string{}
	for _, id := range ids {
		want[id], held[id] = Demand{Slot: r.catalog[id], Pod: pod}, pod
	}
	return want, held
}

func (r rig) id(profile string, start int) string {
	return protocol.OnDemandID(r.parent, profile, start)
}

// instances are the MIG devices on the GPU now, by placement start.
func (r rig) instances(t *testing.T) map[int]string {
	t.Helper()
	devs, err := gpu.Discover(r.lib)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, in := range devs[0].MIG.Instances {
		out[in.Start] = in.UUID
	}
	return out
}

func TestMakeThenDestroy(t *testing.T) {
	r := newRig(t, "")
	m := r.open(t)
	id := r.id("3g.40gb", 4)
	changes := m.Changed()
	if changed, err := m.Reconcile(r.want("ns/a/uid-a", id)); err != nil || !changed {
		t.Fatalf("make: changed %v, %v", changed, err)
	}
	uuid, ok := m.Made(id, "ns/a/uid-a")
	if got := r.instances(t); !ok || got[4] != uuid || len(got) != 1 {
		t.Fatalf("made %q %v; on the GPU %v", uuid, ok, got)
	}
	select {
	case <-changes:
	default:
		t.Error("waiters not told of the make")
	}
	// Again: nothing to do.
	if changed, err := m.Reconcile(r.want("ns/a/uid-a", id)); err != nil || changed {
		t.Errorf("again: changed %v, %v", changed, err)
	}
	// The next pod booked on it takes it as it is.
	if _, err := m.Reconcile(r.want("ns/b/uid-b", id)); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.Made(id, "ns/b/uid-b"); again != uuid {
		t.Errorf("reused as %s, want %s", again, uuid)
	}
	// Its pod gone but a process still on it (one that escaped the pod,
	// or the host's): kept, quietly, until it ends.
	if err := r.lib.(*gpu.Mock).SetProcess(uuid, os.Getpid(), 100, -1); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} { // changed once: the inventory hides it
		if changed, err := m.Reconcile(nil, nil); err != nil || changed != want {
			t.Fatalf("pass %d with a process on it: changed %v, %v; want %v, kept, no error", i, changed, err, want)
		}
	}
	if got := r.instances(t); got[4] != uuid || len(m.Entries()) != 1 || !m.Busy(id) || m.Entries()[0].Destroying {
		t.Fatalf("with a process on it: on the GPU %v, record %+v, busy %v; want kept, busy, no destroy begun", got, m.Entries(), m.Busy(id))
	}
	// Booked meanwhile for another pod (a leader that had not seen it
	// busy): not handed over while the process runs.
	if _, err := m.Reconcile(r.want("ns/c/uid-c", id)); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Made(id, "ns/c/uid-c"); ok || !m.Busy(id) {
		t.Fatal("handed to the next pod while the last one's process runs on it")
	}
	if err := r.lib.(*gpu.Mock).SetProcess(uuid, os.Getpid(), 0, -1); err != nil {
		t.Fatal(err)
	}
	if changed, err := m.Reconcile(r.want("ns/c/uid-c", id)); err != nil || !changed {
		t.Fatalf("the process ended: changed %v, %v", changed, err)
	}
	if got, ok := m.Made(id, "ns/c/uid-c"); !ok || got != uuid || m.Busy(id) || m.Entries()[0].Destroying {
		t.Fatalf("the process ended: handed %q %v, busy %v, record %+v; want %s to the next pod, no destroy begun", got, ok, m.Busy(id), m.Entries(), uuid)
	}
	// Its pod gone: destroyed, the record empty.
	if changed, err := m.Reconcile(nil, nil); err != nil || !changed {
		t.Fatalf("destroy: changed %v, %v", changed, err)
	}
	if got := r.instances(t); len(got) != 0 {
		t.Errorf("still on the GPU: %v", got)
	}
	if entries, _ := load(r.path); len(entries) != 0 {
		t.Errorf("record after: %+v", entries)
	}
}

// An instance the node did not make is never touched, and a make that
// would overlap it fails and is not recorded.
func TestOthersInstancesUntouched(t *testing.T) {
	r := newRig(t, "1g.10gb") // the operator's, at 0
	theirs := r.instances(t)[0]
	m := r.open(t)
	if _, err := m.Reconcile(r.want("ns/a/uid", r.id("1g.10gb", 0))); err == nil || !strings.Contains(err.Error(), gpu.ErrNoRoom.Error()) {
		t.Errorf("make over the operator's instance: %v", err)
	}
	if _, err := m.Reconcile(nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := r.instances(t); got[0] != theirs || len(got) != 1 {
		t.Errorf("the operator's instance: %v, want %s alone", got, theirs)
	}
	if entries, _ := load(r.path); len(entries) != 0 {
		t.Errorf("record: %+v", entries)
	}
}

// A crash after the intent was recorded: the instance made whole is
// found and kept for its pod, or destroyed once none wants it; one made
// in half is destroyed.
func TestCrashBetweenRecordAndMake(t *testing.T) {
	r := newRig(t, "")
	whole, half := r.catalog[r.id("2g.20gb", 0)], r.catalog[r.id("1g.10gb", 4)]
	made, err := gpu.MakeMIG(r.lib, r.parent, whole.Profile, whole.At)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := r.lib.DeviceGetHandleByUUID(r.parent)
	p, _ := d.GetGpuInstanceProfileInfo(half.Profile)
	if _, ret := d.CreateGpuInstanceWithPlacement(&p, &nvml.GpuInstancePlacement{Start: 4, Size: 1}); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	if err := save(r.path, []Entry{
		{ID: r.id("2g.20gb", 0), Parent: r.parent, Profile: whole.Profile, Start: 0, Size: 2, Pod: "ns/a/uid"},
		{ID: r.id("1g.10gb", 4), Parent: r.parent, Profile: half.Profile, Start: 4, Size: 1, Pod: "ns/b/uid"},
	}); err != nil {
		t.Fatal(err)
	}
	m := r.open(t)
	if _, err := m.Reconcile(r.want("ns/a/uid", r.id("2g.20gb", 0))); err != nil {
		t.Fatal(err)
	}
	if uuid, ok := m.Made(r.id("2g.20gb", 0), "ns/a/uid"); !ok || uuid != made.UUID {
		t.Errorf("found %q %v, want %s, not made again", uuid, ok, made.UUID)
	}
	if _, ok := r.instances(t)[4]; ok {
		t.Error("a MIG device at 4")
	}
	if _, found, _ := gpu.FindMIG(r.lib, r.parent, half.Profile, half.At); found {
		t.Error("the half-made instance is still there")
	}
	if _, err := m.Reconcile(nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := r.instances(t); len(got) != 0 {
		t.Errorf("after its pod went: %v", got)
	}
}

// The maker does not guess: an unreadable record stops it.
func TestCorruptRecord(t *testing.T) {
	r := newRig(t, "")
	if err := os.WriteFile(r.path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(r.path, NVML{Lib: r.lib}, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "fix or remove it") {
		t.Errorf("corrupt record: %v", err)
	}
}

func TestWantedAndPossible(t *testing.T) {
	r := newRig(t, "")
	assigned := func(name, node string, phase corev1.PodPhase, ids ...string) *corev1.Pod {
		var gpus []protocol.GPUSlice
		for _, id := range ids {
			gpus = append(gpus, protocol.GPUSlice{UUID: id, MemoryMiB: 1, Cores: 1, MIG: true, Make: true})
		}
		raw, err := protocol.EncodeAssignment(protocol.Assignment{Node: node, Containers: []protocol.ContainerAssignment{{Name: "c", GPUs: gpus}}})
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-x" + name), Annotations: map[string]string{wellknown.AnnotationAssignment: raw}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	stale := protocol.OnDemandID(r.parent, "1g.5gb", 0)
	want, held, unknown := Wanted([]*corev1.Pod{
		assigned("a", "n1", corev1.PodRunning, r.id("3g.40gb", 0)),
		assigned("done", "n1", corev1.PodSucceeded, r.id("1g.10gb", 4)),
		assigned("elsewhere", "n2", corev1.PodRunning, r.id("1g.10gb", 5)),
		assigned("stale", "n1", corev1.PodPending, stale),
	}, "n1", r.catalog)
	if len(want) != 1 || want[r.id("3g.40gb", 0)].Pod != "ns/a/u-xa" || want[r.id("3g.40gb", 0)].At != (mig.Span{Start: 0, Size: 4}) {
		t.Errorf("want %+v", want)
	}
	if len(held) != 2 || held[stale] != "ns/stale/u-xstale" {
		t.Errorf("held %v: want the stale name held too", held)
	}
	if len(unknown) != 1 || !strings.HasSuffix(unknown[0], stale) {
		t.Errorf("unknown %v", unknown)
	}

	// The operator's instance at 6 takes the placements over it; a made
	// one is listed with its device.
	ps := Possible(r.parent, r.catalog, []mig.Span{{Start: 6, Size: 1}}, map[string]string{r.id("3g.40gb", 0): "MIG-made"})
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.Profile+"@"+itoa(p.Start)+"/"+p.Made)
	}
	want2 := []string{"1g.10gb@0/", "1g.10gb@1/", "1g.10gb@2/", "1g.10gb@3/", "1g.10gb@4/", "1g.10gb@5/",
		"2g.20gb@0/", "2g.20gb@2/", "2g.20gb@4/", "3g.40gb@0/MIG-made", "4g.40gb@0/", "1g.20gb@0/", "1g.20gb@2/", "1g.20gb@4/"}
	if !slices.Equal(ids, want2) {
		t.Errorf("possible %v\nwant     %v", ids, want2)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A destroy cut short between the compute and the GPU instance (the
// node role killed in between) is finished at the next start: the GPU
// instance would otherwise take its room for good, as an operator's.
// Only where the record says a destroy began: a bare GPU instance there
// otherwise may be an operator's, made since the node's went.
func TestHalfDestroyedIsFinished(t *testing.T) {
	for _, begun := range []bool{true, false} {
		r := newRig(t, "")
		id := r.id("3g.40gb", 4)
		if _, err := r.open(t).Reconcile(r.want("ns/a/uid", id)); err != nil {
			t.Fatal(err)
		}
		entries, _ := load(r.path)
		entries[0].Destroying = begun
		if err := save(r.path, entries); err != nil {
			t.Fatal(err)
		}
		made := *entries[0].Made
		d, _ := r.lib.DeviceGetHandleByUUID(r.parent)
		gi, _ := d.GetGpuInstanceById(made.GI)
		ci, _ := gi.GetComputeInstanceById(made.CI)
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(nvml.ErrorString(ret))
		}
		m := r.open(t) // the next start
		if changed, err := m.Reconcile(nil, nil); err != nil || !changed {
			t.Fatalf("begun %v: changed %v, %v", begun, changed, err)
		}
		_, found, _ := gpu.FindMIG(r.lib, r.parent, entries[0].Profile, mig.Span{Start: 4, Size: 4})
		if found == begun || len(m.Entries()) != 0 {
			t.Errorf("begun %v: the GPU instance left %v, record %+v; want it destroyed only where begun, the entry forgotten", begun, found, m.Entries())
		}
	}
}

// After a start, an instance the record names that is not on its GPU
// (the host rebooted) is forgotten, and made again if a pod still wants
// it; one whose GPU is gone is forgotten too.
func TestRecordedInstanceGone(t *testing.T) {
	r := newRig(t, "")
	one := r.catalog[r.id("1g.10gb", 3)]
	if err := save(r.path, []Entry{
		{ID: r.id("1g.10gb", 3), Parent: r.parent, Profile: one.Profile, Start: 3, Size: 1, Made: &gpu.Made{UUID: "MIG-before-the-reboot", GI: 9, CI: 0}, Pod: "ns/a/uid"},
		{ID: protocol.OnDemandID("GPU-gone", "1g.10gb", 0), Parent: "GPU-gone", Profile: one.Profile, Start: 0, Size: 1, Made: &gpu.Made{UUID: "MIG-on-a-gone-gpu", GI: 1, CI: 0}, Pod: "ns/b/uid"},
	}); err != nil {
		t.Fatal(err)
	}
	m := r.open(t)
	if _, err := m.Reconcile(r.want("ns/a/uid", r.id("1g.10gb", 3))); err != nil {
		t.Fatal(err)
	}
	uuid, ok := m.Made(r.id("1g.10gb", 3), "ns/a/uid")
	if !ok || uuid == "MIG-before-the-reboot" || r.instances(t)[3] != uuid {
		t.Errorf("made %q %v, on the GPU %v: want it made again", uuid, ok, r.instances(t))
	}
	if all := m.MadeAll(); len(all) != 1 {
		t.Errorf("made %v; the gone GPU's instance is still recorded", all)
	}
}

// An instance a pod still holds is never destroyed, though the catalog
// no longer knows it (a profile taken off the allowlist, the GPU's
// index renumbered); and the next pod booked on a made instance gets it
// only once the maker has seen that pod.
func TestHeldInstancesStay(t *testing.T) {
	r := newRig(t, "")
	m := r.open(t)
	id := r.id("2g.20gb", 2)
	if _, err := m.Reconcile(r.want("ns/a/uid-a", id)); err != nil {
		t.Fatal(err)
	}
	uuid, _ := m.Made(id, "ns/a/uid-a")
	if _, err := m.Reconcile(nil, map[string]string{id: "ns/a/uid-a"}); err != nil {
		t.Fatal(err)
	}
	if got := r.instances(t)[2]; got != uuid {
		t.Fatalf("held, unknown to the catalog: on the GPU %q, want %s kept", got, uuid)
	}
	if _, ok := m.Made(id, "ns/b/uid-b"); ok {
		t.Error("handed to pod b while pod a holds it")
	}
}

// One recorded instance the maker cannot check does not keep the others
// from their pods; after Recheck none is handed out until checked again.
func TestCheckedPerInstance(t *testing.T) {
	r := newRig(t, "")
	m := r.open(t)
	a, b := r.id("1g.10gb", 0), r.id("1g.10gb", 1)
	want, held := r.want("ns/a/uid", a, b)
	if _, err := m.Reconcile(want, held); err != nil {
		t.Fatal(err)
	}
	entries := m.Entries()
	// A third, on a GPU whose profiles no longer answer: its check fails.
	entries = append(entries, Entry{ID: "MIGX-x", Parent: r.parent, Profile: 99, Start: 5, Size: 1, Made: &gpu.Made{UUID: "MIG-x"}, Pod: "ns/x/uid"})
	if err := save(r.path, entries); err != nil {
		t.Fatal(err)
	}
	m = r.open(t) // a restart
	held["MIGX-x"] = "ns/x/uid"
	if _, err := m.Reconcile(want, held); err == nil {
		t.Error("the unreadable instance's check raised no error")
	}
	if _, ok := m.Made(a, "ns/a/uid"); !ok {
		t.Error("a checked instance withheld for another's failed check")
	}
	m.Recheck()
	if _, ok := m.Made(a, "ns/a/uid"); ok {
		t.Error("handed out after Recheck, before the check")
	}
	if _, err := m.Reconcile(want, held); err == nil {
		t.Error("want the unreadable instance's error again")
	}
	if _, ok := m.Made(b, "ns/a/uid"); !ok {
		t.Error("not handed out once checked again")
	}
}

// Two processes on one record (a node role pod replacing another): the
// second waits for the first's lock, then reads what the first wrote.
func TestLockHandsTheRecordOver(t *testing.T) {
	r := newRig(t, "")
	release, err := Lock(context.Background(), r.path, nil, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	old := r.open(t)
	if _, err := old.Reconcile(r.want("ns/a/uid", r.id("1g.10gb", 0))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	waited := false
	if _, err := Lock(ctx, r.path, func() { waited = true }, clock.RealClock{}); err == nil || !waited {
		t.Fatalf("took the lock the old process holds: %v (waited %v)", err, waited)
	}
	release()
	release, err = Lock(context.Background(), r.path, nil, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	next := r.open(t)
	if len(next.Entries()) != 1 {
		t.Errorf("the next process reads %+v; want what the old one made", next.Entries())
	}
}

// flaky is the NVML driver with its process check and destroy answered
// as a test says: what a race with a process, or a failing driver, does.
type flaky struct {
	NVML
	inUse   error
	destroy error
}

func (f *flaky) InUse(parent string, m gpu.Made) error {
	if f.inUse != nil {
		return f.inUse
	}
	return f.NVML.InUse(parent, m)
}

func (f *flaky) Destroy(parent string, profile int, at mig.Span, m gpu.Made, begun bool) (bool, error) {
	if f.destroy != nil {
		return false, f.destroy
	}
	return f.NVML.Destroy(parent, profile, at, m, begun)
}

// A destroy refused because a process came between the look and the
// destroy leaves no destroy mark; one that fails otherwise leaves the
// mark and the instance unchecked (handed to no pod) until looked at
// again; a process seen then clears the mark, the instance being whole.
func TestDestroyRacesAndFailures(t *testing.T) {
	r := newRig(t, "")
	drv := &flaky{NVML: NVML{Lib: r.lib}}
	m, err := Open(r.path, drv, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	id := r.id("3g.40gb", 4)
	if _, err := m.Reconcile(r.want("ns/a/uid", id)); err != nil {
		t.Fatal(err)
	}
	marked := func() bool {
		entries, _ := load(r.path)
		return len(entries) == 1 && entries[0].Destroying
	}
	drv.destroy = fmt.Errorf("destroy compute instance: %w", gpu.ErrInUse)
	if _, err := m.Reconcile(nil, nil); err != nil || marked() || !m.Busy(id) {
		t.Fatalf("a process came between: %v, marked %v, busy %v; want busy, no mark", err, marked(), m.Busy(id))
	}
	drv.destroy = errors.New("GPU instance: unknown error")
	if _, err := m.Reconcile(nil, nil); err == nil || !marked() {
		t.Fatalf("a failing destroy: %v, marked %v; want its error and the mark", err, marked())
	}
	if _, ok := m.Made(id, "ns/a/uid"); ok {
		t.Error("handed out after a failed destroy, unchecked")
	}
	drv.destroy, drv.inUse = nil, fmt.Errorf("MIG device: %w", gpu.ErrInUse)
	if _, err := m.Reconcile(nil, nil); err != nil || marked() || len(r.instances(t)) != 1 {
		t.Fatalf("a process on it now: %v, marked %v, on the GPU %v; want it kept whole, no mark", err, marked(), r.instances(t))
	}
	drv.inUse = nil
	if _, err := m.Reconcile(nil, nil); err != nil || len(r.instances(t)) != 0 || len(m.Entries()) != 0 {
		t.Fatalf("the process gone: %v, on the GPU %v, record %+v; want it destroyed", err, r.instances(t), m.Entries())
	}
}
