package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// fakeNodes is a map-backed Nodes.
type fakeNodes map[string]fit.Node

func (f fakeNodes) NodeFor(name string, _ types.UID) (fit.Node, *fit.Reason) {
	if name == "restarting" {
		return fit.Node{}, &fit.Reason{Kind: "device plugin not serving", Text: "vgpud there is stopping or starting", Passing: true}
	}
	n, ok := f[name]
	if !ok {
		return fit.Node{}, &fit.Reason{Kind: "no vgpud inventory", Text: "node has no vgpud.io/gpus annotation"}
	}
	g := make([]fit.CommittedGPU, len(n.GPUs))
	copy(g, n.GPUs)
	n.GPUs = g
	return n, nil
}

func (f fakeNodes) EachNodeFor(names []string, pod types.UID, each func(int, fit.Node, int64, *fit.Reason) bool) {
	for i, name := range names {
		n, r := f.NodeFor(name, pod)
		if !each(i, n, fit.Fullness(n), r) {
			return
		}
	}
}

func gpuNode(name string, usedMem ...int64) fit.Node {
	n := fit.Node{Name: name}
	for i, m := range usedMem {
		n.GPUs = append(n.GPUs, fit.CommittedGPU{
			GPU:  protocol.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: "NVIDIA A100", MemoryMiB: 16000, Cores: 100, Split: 10, Healthy: true},
			Used: podmodel.Usage{MemMiB: m, Slots: btoi(m > 0)},
		})
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The pod JSON is what kube-scheduler sends, trimmed to what matters.
const podJSON = `{"metadata":{"name":"train","namespace":"ai","uid":"uid-train","annotations":{%s}},"spec":{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]}}`

func placer(t testing.TB, events *[]string) *Placer {
	nodes := fakeNodes{"roomy": gpuNode("roomy", 2000), "full": gpuNode("full", 10000), "empty": gpuNode("empty", 0)}
	rec := func(p *corev1.Pod, reason, msg string) { *events = append(*events, p.Name+": "+msg) }
	// The informer holds podJSON at resourceVersion 7; bodies without a
	// resourceVersion are decoded.
	var api corev1.Pod
	if err := json.Unmarshal([]byte(fmt.Sprintf(podJSON, "")), &api); err != nil {
		t.Fatal(err)
	}
	api.ResourceVersion = "7"
	record := slimpod.Of(&api, wellknown.DefaultResourceNames())
	known := func(ns, name string) *slimpod.Pod {
		if ns == "ai" && name == "train" {
			return record
		}
		return nil
	}
	return NewPlacer(nodes, nil, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), known, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func postTo(h http.HandlerFunc, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	return w
}

func TestFilterNodeNames(t *testing.T) {
	var events []string
	h := placer(t, &events)
	body := `{"Pod":` + fmt.Sprintf(podJSON, "") + `,"NodeNames":["full","roomy","gone","empty"]}`
	w := postTo(FilterHandler(h), body)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	// Sized, so that net/http need not chunk it.
	if got, want := w.Header().Get("Content-Length"), strconv.Itoa(w.Body.Len()); got != want {
		t.Errorf("Content-Length %q, want %s", got, want)
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	// roomy and empty fit; binpack, the default, returns only the fuller.
	if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "roomy" {
		t.Fatalf("fitting nodes %v", res.NodeNames)
	}
	if !strings.Contains(res.FailedNodes["full"], "largest free 6000 MiB < 10000") || !strings.Contains(res.FailedNodes["gone"], "vgpud.io/gpus") || len(res.FailedNodes) != 2 {
		t.Errorf("failed nodes %v", res.FailedNodes)
	}
	if len(events) != 0 {
		t.Errorf("events %q for a pod that fits", events)
	}
	// spread returns the emptier.
	w = postTo(FilterHandler(h), `{"Pod":`+fmt.Sprintf(podJSON, `"vgpud.io/node-policy":"spread"`)+`,"NodeNames":["full","roomy","gone","empty"]}`)
	res = extenderv1.ExtenderFilterResult{}
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "empty" {
		t.Fatalf("spread: fitting nodes %v (%v)", res.NodeNames, err)
	}
	// Nothing fits: the reasons, summed up in one Event.
	w = postTo(FilterHandler(h), `{"Pod":`+fmt.Sprintf(podJSON, "")+`,"NodeNames":["full","gone"]}`)
	if w.Code != 200 || len(events) != 1 || events[0] != "train: 0/2 nodes fit: 1 insufficient gpumem (largest free 6000 MiB < 10000), 1 no vgpud inventory" {
		t.Errorf("events %q (%d %s)", events, w.Code, w.Body)
	}
}

// Filter returns the best node that has no binds queued: a burst moves on
// to the next node by the policy.
func TestFilterPassesOverQueuedNodes(t *testing.T) {
	nodes := fakeNodes{"roomy": gpuNode("roomy", 2000), "full": gpuNode("full", 10000), "empty": gpuNode("empty", 0)}
	pod := &corev1.Pod{}
	if err := json.Unmarshal([]byte(fmt.Sprintf(podJSON, "")), pod); err != nil {
		t.Fatal(err)
	}
	p := NewPlacer(nodes, fakeQueue{"roomy": maxQueued}, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), nil, nil, quietLogger())
	if fits, _, err := p.Filter(context.Background(), recordOf(pod), []string{"roomy", "empty"}); err != nil || !slices.Equal(fits, []string{"empty"}) {
		t.Errorf("roomy queued: fits %v (%v), want empty", fits, err)
	}
	if fits, _, err := p.Filter(context.Background(), recordOf(pod), []string{"roomy", "full"}); err != nil || !slices.Equal(fits, []string{"roomy"}) {
		t.Errorf("roomy queued but the only fit: fits %v (%v)", fits, err)
	}
}

// A body naming a pod the leader does not know (or one recreated under
// the name) is answered, but no Event is written on its say-so.
func TestFilterRecordsEventsOnlyOnKnownPods(t *testing.T) {
	var events []string
	h := placer(t, &events)
	for _, meta := range []string{
		`{"name":"victim","namespace":"other","uid":"x"}`,
		`{"name":"train","namespace":"ai","uid":"uid-forged"}`,
	} {
		body := `{"Pod":{"metadata":` + meta + `,"spec":{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"99999"}}}]}},"NodeNames":["full"]}`
		if w := postTo(FilterHandler(h), body); w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	if len(events) != 0 {
		t.Fatalf("events on pods the leader did not fetch: %q", events)
	}
}

func TestFilterFullNodes(t *testing.T) {
	var events []string
	h := placer(t, &events)
	body := `{"Pod":` + fmt.Sprintf(podJSON, `"nvidia.com/nouse-gputype":"a100"`) + `,"Nodes":{"items":[{"metadata":{"name":"roomy"}}]}}`
	var res extenderv1.ExtenderFilterResult
	w := postTo(FilterHandler(h), body)
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Nodes == nil || len(res.Nodes.Items) != 0 || !strings.Contains(res.FailedNodes["roomy"], "use/nouse-gputype") {
		t.Fatalf("result %+v", res)
	}
}

func TestPrioritizeByPolicy(t *testing.T) {
	var events []string
	h := placer(t, &events)
	scores := func(annotations string) map[string]int64 {
		w := postTo(PrioritizeHandler(h), `{"Pod":`+fmt.Sprintf(podJSON, annotations)+`,"NodeNames":["empty","roomy","full"]}`)
		var list extenderv1.HostPriorityList
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
			t.Fatalf("%s: %v", w.Body, err)
		}
		out := map[string]int64{}
		for _, p := range list {
			if p.Score < 0 || p.Score > 10 {
				t.Fatalf("score %d out of 0..10", p.Score)
			}
			out[p.Host] = p.Score
		}
		return out
	}
	bin := scores("")
	// The fitting nodes are ranked against each other: the fuller gets
	// the top of the scale, the emptier the bottom; the full one is out.
	if bin["roomy"] != 10 || bin["empty"] != 0 || bin["full"] != 0 {
		t.Errorf("binpack scores %v", bin)
	}
	spread := scores(`"hami.io/node-scheduler-policy":"spread"`)
	if spread["empty"] != 10 || spread["roomy"] != 0 {
		t.Errorf("spread scores %v", spread)
	}
}

type fakeQueue map[string]int

func (q fakeQueue) Queued(node string) int { return q[node] }

// Binpack prefers the fuller node, until binds queue up there: then the
// next by the policy, and the queued node only when nothing else fits.
func TestPrioritizeAvoidsQueuedNodes(t *testing.T) {
	nodes := fakeNodes{"roomy": gpuNode("roomy", 2000), "full": gpuNode("full", 10000), "empty": gpuNode("empty", 0)}
	pod := &corev1.Pod{}
	if err := json.Unmarshal([]byte(fmt.Sprintf(podJSON, "")), pod); err != nil {
		t.Fatal(err)
	}
	scores := func(q fakeQueue, names ...string) map[string]int64 {
		p := NewPlacer(nodes, q, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}), nil, nil, quietLogger())
		list, err := p.Prioritize(context.Background(), recordOf(pod), names)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, h := range list {
			out[h.Host] = h.Score
		}
		return out
	}
	if s := scores(fakeQueue{"roomy": maxQueued - 1}, "empty", "roomy"); s["roomy"] != 10 || s["empty"] != 0 {
		t.Errorf("one bind under way on roomy: %v, want roomy still first", s)
	}
	if s := scores(fakeQueue{"roomy": maxQueued}, "empty", "roomy"); s["empty"] <= s["roomy"] || s["roomy"] != 0 {
		t.Errorf("%d binds queued on roomy: %v, want empty first and roomy 0", maxQueued, s)
	}
	if s := scores(fakeQueue{"roomy": maxQueued}, "roomy", "full"); s["roomy"] != 10 {
		t.Errorf("roomy queued but the only node that fits: %v, want it ranked as usual", s)
	}
}

func TestBadInput(t *testing.T) {
	var events []string
	h := placer(t, &events)
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"Pod":`, 400, "malformed ExtenderArgs JSON"},
		{`{"NodeNames":["a"]}`, 400, "no pod"},
		{`[1,2]`, 400, "malformed"},
		{`{"Pod":null,"NodeNames":["a"]}`, 400, "no pod"},
		{`{"Pod":"x","NodeNames":["a"]}`, 400, "malformed ExtenderArgs Pod: the pod is not a JSON object"},
		{`{"Pod":[],"NodeNames":["a"]}`, 400, "malformed ExtenderArgs Pod: the pod is not a JSON object"},
		{`{"Pod":{"metadata":{"uid":5}},"NodeNames":["a"]}`, 400, "malformed ExtenderArgs Pod: pod metadata: json: cannot unmarshal number into Go struct field"},
		{`{"Pod":{"metadata":{"name":"p"},"spec":{"containers":7}},"NodeNames":["a"]}`, 400, "malformed ExtenderArgs Pod: pod /p: json: cannot unmarshal number"},
		// Neither NodeNames nor Nodes: refused, not dereferenced.
		{`{"Pod":` + fmt.Sprintf(podJSON, "") + `}`, 400, "neither NodeNames nor Nodes"},
	} {
		w := postTo(FilterHandler(h), tc.body)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s: %d %q", tc.body, w.Code, w.Body)
		}
	}
	w := httptest.NewRecorder()
	FilterHandler(h)(w, httptest.NewRequest(http.MethodGet, "/filter", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", w.Code)
	}
	// A pod with an impossible value is answered with Error, not a crash.
	bad := `{"Pod":{"metadata":{"name":"p","namespace":"n"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpucores":"150"}}}]}},"NodeNames":["roomy"]}`
	var res extenderv1.ExtenderFilterResult
	_ = json.Unmarshal(postTo(FilterHandler(h), bad).Body.Bytes(), &res)
	if !strings.Contains(res.Error, "nvidia.com/gpucores is 150") {
		t.Errorf("error %q", res.Error)
	}
	bad = `{"Pod":` + fmt.Sprintf(podJSON, `"vgpud.io/gpu-policy":"random"`) + `,"NodeNames":["roomy"]}`
	_ = json.Unmarshal(postTo(FilterHandler(h), bad).Body.Bytes(), &res)
	if !strings.Contains(res.Error, `vgpud.io/gpu-policy="random"`) {
		t.Errorf("error %q", res.Error)
	}
	// A selector list past the bound (a tenant may patch it onto a
	// pending pod after admission) is refused before any node is matched.
	bad = `{"Pod":` + fmt.Sprintf(podJSON, `"nvidia.com/use-gputype":"`+strings.Repeat("A100,", 50000)+`"`) + `,"NodeNames":["roomy"]}`
	res = extenderv1.ExtenderFilterResult{}
	_ = json.Unmarshal(postTo(FilterHandler(h), bad).Body.Bytes(), &res)
	if !strings.Contains(res.Error, "annotation nvidia.com/use-gputype is longer than 4096 bytes") {
		t.Errorf("error %q", res.Error)
	}
	bad = `{"Pod":` + fmt.Sprintf(podJSON, "") + `,"NodeNames":["roomy"]}`
	bad = strings.Replace(bad, `"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"`, `"nvidia.com/gpu":"0"`, 1)
	res = extenderv1.ExtenderFilterResult{}
	_ = json.Unmarshal(postTo(FilterHandler(h), bad).Body.Bytes(), &res)
	if !strings.Contains(res.Error, "nvidia.com/gpu is 0") {
		t.Errorf("a pod asking for no GPU: error %q", res.Error)
	}
	if w := postTo(FilterHandler(h), string(bytes.Repeat([]byte(" "), maxArgsBody+1))); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "nodeCacheCapable") {
		t.Errorf("oversized body: %d %s", w.Code, w.Body)
	}
	for _, verb := range []http.HandlerFunc{PrioritizeHandler(h), FilterHandler(h)} {
		if w := postTo(verb, `{"Pod":`+fmt.Sprintf(podJSON, "")+`}`); w.Code != 400 {
			t.Errorf("no nodes: %d %s", w.Code, w.Body)
		}
	}
}

// A node refused only while vgpud restarts there makes a pod that fits
// nowhere else an error (kube-scheduler retries it within seconds), not an
// unschedulable pod that waits for an event that never comes.
func TestFilterRetriesWhileVGPUDRestarts(t *testing.T) {
	var events []string
	h := placer(t, &events)
	for _, tc := range []struct {
		nodes, fits, err string
	}{
		{nodes: `"full","restarting"`, err: "no node fits now; vgpud is restarting on restarting: retrying"},
		{nodes: `"roomy","restarting"`, fits: "roomy"},
		{nodes: `"full"`},
	} {
		w := postTo(FilterHandler(h), `{"Pod":`+fmt.Sprintf(podJSON, "")+`,"NodeNames":[`+tc.nodes+`]}`)
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		fits := ""
		if res.NodeNames != nil {
			fits = strings.Join(*res.NodeNames, ",")
		}
		if res.Error != tc.err || fits != tc.fits {
			t.Errorf("nodes %s: error %q, fits %q; want %q, %q", tc.nodes, res.Error, fits, tc.err, tc.fits)
		}
	}
}

// A filter whose caller has given up stops instead of matching the rest
// of the nodes, and says why.
func TestFilterStopsWhenTheCallerGivesUp(t *testing.T) {
	var events []string
	p := placer(t, &events)
	var api corev1.Pod
	if err := json.Unmarshal([]byte(fmt.Sprintf(podJSON, "")), &api); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	names := make([]string, 1000)
	for i := range names {
		names[i] = "roomy"
	}
	if _, _, err := p.Filter(ctx, recordOf(&api), names); err == nil || !strings.Contains(err.Error(), "caller gave up") {
		t.Fatalf("filter after cancel: %v", err)
	}
	if _, err := p.Prioritize(ctx, recordOf(&api), names); err == nil || !strings.Contains(err.Error(), "caller gave up") {
		t.Fatalf("prioritize after cancel: %v", err)
	}
	if len(events) != 0 {
		t.Fatalf("events %q for a call nobody waits on", events)
	}
}
