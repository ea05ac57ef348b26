package extender

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The placer reads the informer's record of the pod when it is the very
// version the body carries, and the body otherwise: here the two differ in
// what they ask, so the answer shows which was read.
func TestPodFromInformerOnlyAtTheSameVersion(t *testing.T) {
	// In the informer: resourceVersion 7 asks 15000 MiB, which only
	// "empty" has free.
	informer := recordOf(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ai", UID: "uid-train", ResourceVersion: "7"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("15000")}}}}},
	})
	lookup := func(ns, name string) *slimpod.Pod {
		if ns == "ai" && name == "train" {
			return informer
		}
		return nil
	}
	nodes := fakeNodes{"roomy": gpuNode("roomy", 2000), "empty": gpuNode("empty", 0)}
	p := NewPlacer(nodes, nil, wellknown.DefaultResourceNames(), NewPolicy(Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, Options: fit.Options{DefaultMemPercent: 100}}),
		lookup, func(*corev1.Pod, string, string) {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The body asks 10000 MiB: roomy (binpack's pick) fits that.
	body := func(uid, rv string) string {
		return `{"Pod":{"metadata":{"name":"train","namespace":"ai","uid":"` + uid + `","resourceVersion":"` + rv + `"},` +
			`"spec":{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]}},"NodeNames":["roomy","empty"]}`
	}
	reads := map[bool]int{}
	p.NotifyPodRead(func(fromInformer bool) { reads[fromInformer]++ })
	for _, c := range []struct {
		what, uid, rv, want string
	}{
		{"same UID and version: the informer's record", "uid-train", "7", `"NodeNames":["empty"]`},
		{"another version: the body", "uid-train", "8", `"NodeNames":["roomy"]`},
		{"another pod under the name: the body", "uid-other", "7", `"NodeNames":["roomy"]`},
		{"no version: the body", "uid-train", "", `"NodeNames":["roomy"]`},
	} {
		w := postTo(FilterHandler(p), body(c.uid, c.rv))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: %d %s, want %s", c.what, w.Code, w.Body, c.want)
		}
	}
	if reads[true] != 1 || reads[false] != 3 {
		t.Errorf("reads told: %d from the informer, %d decoded; want 1 and 3", reads[true], reads[false])
	}
	// A pod that is not a JSON object is refused, saying so.
	w := postTo(FilterHandler(p), `{"Pod":5,"NodeNames":["roomy"]}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "malformed ExtenderArgs Pod") {
		t.Errorf("Pod 5: %d %s", w.Code, w.Body)
	}
}

// The same pod read from the informer and decoded from the body gets the
// same answer.
func TestPodFromInformerAnswersAsTheBody(t *testing.T) {
	var events []string
	h := placer(t, &events)
	withVersion := strings.Replace(fmt.Sprintf(podJSON, ""), `"uid":"uid-train"`, `"uid":"uid-train","resourceVersion":"7"`, 1)
	if !strings.Contains(withVersion, `"resourceVersion":"7"`) {
		t.Fatal("podJSON has no uid to put the version beside")
	}
	if rec, err := h.Pod([]byte(withVersion)); err != nil || rec.ResourceVersion != "7" || rec != h.lookup("ai", "train") {
		t.Fatalf("not the informer's record: %+v %v", rec, err)
	}
	for _, verb := range []http.HandlerFunc{FilterHandler(h), PrioritizeHandler(h)} {
		names := `,"NodeNames":["full","roomy","gone","empty"]}`
		body, informer := postTo(verb, `{"Pod":`+fmt.Sprintf(podJSON, "")+names), postTo(verb, `{"Pod":`+withVersion+names)
		if body.Code != 200 || body.Body.String() != informer.Body.String() {
			t.Errorf("decoded: %d %s; from the informer: %d %s", body.Code, body.Body, informer.Code, informer.Body)
		}
	}
}
