package extender

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzExtenderBodies sends arbitrary bodies to every verb: each answers
// with a status (never a panic), a 200 carries well-formed JSON, and no
// body a caller sends books anything without a pod in the API.
func FuzzExtenderBodies(f *testing.F) {
	for _, seed := range []string{
		`{"Pod":` + fmt.Sprintf(podJSON, "") + `,"NodeNames":["full","roomy","gone","empty"]}`,
		`{"Pod":` + fmt.Sprintf(podJSON, `"vgpud.io/gpu-policy":"binpack"`) + `,"Nodes":{"items":[{"metadata":{"name":"roomy"}}]}}`,
		`{"Pod":` + fmt.Sprintf(podJSON, "") + `}`,
		// The version the placer's informer holds: read from there.
		`{"Pod":{"metadata":{"name":"train","namespace":"ai","uid":"uid-train","resourceVersion":"7"}},"NodeNames":["full","roomy","empty"]}`,
		`{"PodName":"p1","PodNamespace":"ai","PodUID":"uid-p1","Node":"n1"}`,
		`{"PodName":"p1","PodNamespace":"ai","Node":"n1"}`,
		`{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"9223372036854775807","nvidia.com/gpumem":"1e18"}}}]}},"NodeNames":[]}`,
		`[]`, `null`, `{`,
	} {
		f.Add(seed)
	}
	var events []string
	p := placer(f, &events)
	e := newBindEnv(f, 10, 50*time.Millisecond, bindPod("p1", "4000"))
	verbs := map[string]http.HandlerFunc{"filter": FilterHandler(p), "prioritize": PrioritizeHandler(p), "bind": BindHandler(e.binder)}
	f.Fuzz(func(t *testing.T, body string) {
		for name, h := range verbs {
			w := postTo(h, body)
			if w.Code == http.StatusOK && !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%s answered 200 with invalid JSON %q", name, w.Body)
			}
			if w.Code != http.StatusOK && !strings.Contains(w.Body.String(), " ") {
				t.Fatalf("%s refused without a message: %d %q", name, w.Code, w.Body)
			}
		}
		for _, b := range e.books.Pods() {
			if b != "ai/p1@n1" {
				t.Fatalf("booked %s, a pod that is not in the API", b)
			}
		}
	})
}
