package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/internal/configapi"
)

// The chart's clusterSettings, in its values schema and its template
// checks, are the keys cluster-settings.yaml may set (configapi), each
// with its type and bounds; VGPUD_UPDATE_DOCS=1 go test ./manifests/
// writes them after a change.
func TestChartClusterSettingsAreTheAPIs(t *testing.T) {
	settings := cluster.FileSettings()
	const schemaPath = "../charts/vgpud/values.schema.json"
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)("clusterSettings": \{\n\s*"type": "object",\n\s*"additionalProperties": false,\n\s*"properties": \{\n)(.*?)(\n\s*\}\n)`)
	m := block.FindSubmatchIndex(raw)
	if m == nil {
		t.Fatalf("%s: no clusterSettings properties block", schemaPath)
	}
	indent := strings.Repeat(" ", 8)
	lines := make([]string, len(settings))
	for i, s := range settings {
		v, err := json.Marshal(s.Schema())
		if err != nil {
			t.Fatal(err)
		}
		lines[i] = fmt.Sprintf("%s%q: %s", indent, s.Key, v)
	}
	schema := string(raw[:m[4]]) + strings.Join(lines, ",\n") + string(raw[m[5]:])

	const tplPath = "../charts/vgpud/templates/_validate.tpl"
	tplRaw, err := os.ReadFile(tplPath)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = fmt.Sprintf("%q", s.Key)
	}
	list := regexp.MustCompile(`(?m)^(\{\{- if not \(has \$k \(list )[^)]*(\)\) -\}\}\n\{\{- fail \(printf "clusterSettings\.%s: want )[^"]*(" \$k\) -\}\})$`)
	if !list.Match(tplRaw) {
		t.Fatalf("%s: no clusterSettings key check", tplPath)
	}
	tpl := list.ReplaceAllString(string(tplRaw), "${1}"+strings.Join(keys, " ")+"${2}"+strings.ReplaceAll(configapi.Keys(settings), "$", "$$")+"${3}")

	for path, want := range map[string]string{schemaPath: schema, tplPath: tpl} {
		got, _ := os.ReadFile(path)
		if string(got) == want {
			continue
		}
		if os.Getenv("VGPUD_UPDATE_DOCS") != "" {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s's clusterSettings are not the API's keys: run VGPUD_UPDATE_DOCS=1 go test ./manifests/", path)
	}
	var parsed map[string]any
	if err := json.Unmarshal([]byte(schema), &parsed); err != nil {
		t.Fatalf("the schema written is not JSON: %v", err)
	}
}
