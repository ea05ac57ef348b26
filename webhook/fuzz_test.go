package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/vgpud/vgpud/protocol/podmodel"
)

// FuzzHandler feeds arbitrary bodies to /webhook: it never panics, and every
// answer is either a 4xx or a 200 AdmissionReview for the request's uid
// whose patch, if any, applies to the object sent.
func FuzzHandler(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "admission", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, ".want.json") {
			continue
		}
		body, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":null}}`))

	cfg := testConfig()
	cfg.VisibleDevicesNone = true
	cfg.RuntimeClass = "nvidia"
	cfg.CorePolicy = CorePolicyDefault
	h := NewHTTPHandler(newPods(cfg, quotas{"ai-team": {Memory: podmodel.Limit{Set: true, Hard: 40000, Used: 38000}}}), quietLog())

	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 400 && w.Code < 500 {
			return
		}
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("200 for a body that does not decode: %v", err)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer is not JSON: %v", err)
		}
		if out.Kind != "AdmissionReview" || out.APIVersion != in.APIVersion || out.Response == nil || out.Response.UID != in.Request.UID {
			t.Fatalf("answer is not a review for uid %q: %s", in.Request.UID, w.Body)
		}
		if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
			t.Fatalf("refusal without a message: %s", w.Body)
		}
		if len(out.Response.Patch) > 0 {
			p, err := jsonpatchapply.DecodePatch(out.Response.Patch)
			if err != nil {
				t.Fatalf("patch does not decode: %v", err)
			}
			if _, err := p.Apply(in.Request.Object.Raw); err != nil {
				t.Fatalf("patch %s does not apply to the object: %v", out.Response.Patch, err)
			}
		}
	})
}
