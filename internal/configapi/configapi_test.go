package configapi

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// settings is a part's: a string, a number and a list.
type settings struct {
	Mode  string
	Count int
	List  []string
}

func (s *settings) bind() []Setting {
	return []Setting{
		Bind("mode", "mode", &s.Mode).OneOf("a", "b"),
		Bind("count", "count", &s.Count).Range(0, 9),
		Bind("list", "list", &s.List),
	}
}

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       settings // with refused empty
		refused    string
	}{
		{"empty", "", settings{Mode: "flag", Count: 1, List: []string{"x"}}, ""},
		{"comments only", "# mode: a\n", settings{Mode: "flag", Count: 1, List: []string{"x"}}, ""},
		{"every key", "version: v1\nmode: a\ncount: 3\nlist: [p, q]\n", settings{Mode: "a", Count: 3, List: []string{"p", "q"}}, ""},
		{"no version is v1", "count: 2\n", settings{Mode: "flag", Count: 2, List: []string{"x"}}, ""},
		// As kubectl reads YAML (1.1): a bare true, or y, is a boolean,
		// and where a string is wanted it is the string "true".
		{"a boolean where a string is wanted", "mode: \"y\"\nlist: [on, true]\n", settings{Mode: "y", Count: 1, List: []string{"true", "true"}}, ""},
		{"another version", "version: v2\n", settings{}, `version "v2" is not one this vgpud reads; want v1`},
		{"an unknown key, with the known ones", "version: v1\nmodes: a\n", settings{}, `unknown field "modes"; want mode, count, list`},
		{"a key in another case", "Mode: a\n", settings{}, `unknown field "Mode"`},
		{"a key twice", "mode: a\nmode: b\n", settings{}, "already set"},
		{"a null", "mode:\n", settings{}, "mode is null"},
		{"a null in a list", "list: [a, null]\n", settings{}, "list[1] is null"},
		{"a number as a string", "count: \"3\"\n", settings{}, "count"},
		{"a list as a scalar", "list: p\n", settings{}, "list"},
		{"two documents", "mode: a\n---\ncount: 2\n", settings{}, "more than one YAML document"},
		{"two documents, the second on the marker's line", "mode: a\n--- {count: 2}\n", settings{}, "more than one YAML document"},
		{"two documents, with CRLF", "mode: a\r\n---\r\ncount: 2\r\n", settings{}, "more than one YAML document"},
		{"a second document after an end marker", "mode: a\n...\ncount: 2\n", settings{}, "document start"},
		{"one document, marked", "---\nmode: b\n", settings{Mode: "b", Count: 1, List: []string{"x"}}, ""},
		{"not a mapping", "- mode\n", settings{}, "want a YAML mapping"},
		{"not YAML", "mode: [\n", settings{}, "want YAML"},
		{"too long", "# " + strings.Repeat("x", MaxBytes), settings{}, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := []string{"x"}
			s := settings{Mode: "flag", Count: 1, List: base}
			err := Load([]byte(tc.file), s.bind())
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v, want it to say %q", err, tc.refused)
				}
				return
			}
			if err != nil || s.Mode != tc.want.Mode || s.Count != tc.want.Count || strings.Join(s.List, ",") != strings.Join(tc.want.List, ",") {
				t.Fatalf("%+v, %v; want %+v", s, err, tc.want)
			}
			if base[0] != "x" {
				t.Errorf("the flags' list became %q", base)
			}
		})
	}
}

func TestOverrides(t *testing.T) {
	var proto settings
	file := "version: v1\nnodes:\n- name: a\n  count: 4\n- selector: {matchLabels: {gpu.present: true, mig: y}}\n  list: [z]\n"
	entries, err := Overrides([]byte(file), proto.bind())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Name != "a" || entries[1].Selector.MatchLabels["gpu.present"] != "true" || entries[1].Selector.MatchLabels["mig"] != "true" {
		t.Fatalf("entries %+v: want label values read as strings, as kubectl reads them", entries)
	}
	for node, tc := range map[string]struct {
		labels map[string]string
		want   int
	}{"a": {nil, 0}, "b": {map[string]string{"gpu.present": "true", "mig": "true"}, 1}, "c": {map[string]string{"gpu.present": "false"}, -1}} {
		got, err := Select(entries, node, func() (map[string]string, error) { return tc.labels, nil })
		if err != nil || got != tc.want {
			t.Errorf("%s: entry %d, %v; want %d", node, got, err, tc.want)
		}
	}
	s := settings{Mode: "flag", Count: 1}
	entries[0].Apply(s.bind())
	if s.Count != 4 || s.Mode != "flag" {
		t.Errorf("applied %+v; want count 4 and the flag's mode", s)
	}
	if _, err := Select(entries, "b", nil); err != ErrNeedsLabels {
		t.Errorf("no labels func: %v", err)
	}
	for doc, want := range map[string]string{
		"nodes:\n- name: a\n  counts: 4\n":                       `nodes[0].counts: unknown field "counts"; want mode, count, list`,
		"nodes:\n- name: a\n- name: a\n":                         "listed twice",
		"nodes:\n- count: 3\n":                                   "neither name nor selector",
		"nodes:\n- name: a\n  selector: {matchLabels: {x: y}}\n": "both name and selector",
		// vgpud's own report of the node is written from these settings.
		"nodes:\n- selector: {matchLabels: {vgpud.io/gpu.product: NVIDIA-L4}}\n  count: 2":                 "vgpud.io/gpu.product is vgpud's own report",
		"nodes:\n- selector: {matchExpressions: [{key: vgpud.io/mig.mode, operator: Exists}]}\n  count: 2": "vgpud.io/mig.mode is vgpud's own report",
		"nodes:\n- selector: {}\n  count: 2\n":                                                             "would select every node",
		"nodes:\n- selector: {matchLabels: {\"a b\": c}}\n  count: 2":                                      "selector",
		"nodes: {}":                          "nodes: want a list",
		"nodes:\n- name: a\n  count: null\n": "nodes[0].count is null",
		"version: v1\nnode:\n- name: a\n":    `unknown field "node"`,
		"nodes:\n- name: a\n  count: x\n":    "count",
		"nodes:\n- selector: {matchLabels: {a: b}}\n- selector: {matchLabels: {c: d}}": "",
		// A key below an entry's own in another case is refused too.
		"nodes:\n- selector: {MatchLabels: {a: b}}\n": "MatchLabels",
		// A misspelt key below an entry's own is refused, not dropped.
		"nodes:\n- selector: {matchLabels: {a: b}, matchExpresions: [{key: c, operator: Exists}]}\n": "matchExpresions",
		// No entries, however written: every node on the flags.
		"":                      "",
		"# all commented out\n": "",
		"version: v1\n":         "",
		"version: v1\nnodes:\n": "",
		"nodes: []\n":           "",
	} {
		_, err := Overrides([]byte(doc), proto.bind())
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to mention %q", doc, err, want)
		}
	}
	two, _ := Overrides([]byte("nodes:\n- selector: {matchLabels: {a: b}}\n- selector: {matchLabels: {c: d}}"), proto.bind())
	if _, err := Select(two, "n", func() (map[string]string, error) { return map[string]string{"a": "b", "c": "d"}, nil }); err == nil || !strings.Contains(err.Error(), "both select node n") {
		t.Errorf("two selectors matching: %v", err)
	}
}

// A FIFO in the file's place is refused, not read: it would block.
func TestReadFileRefusesAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.yaml")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skip(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v", err)
	}
}

// The chart's schema for a setting is its type and bounds.
func TestSchema(t *testing.T) {
	var s settings
	b := s.bind()
	if got := b[0].Schema(); len(got) != 1 || got["enum"] == nil {
		t.Errorf("mode: %v; want the enum alone", got)
	}
	if got := b[1].Schema(); got["type"] != "integer" || got["minimum"] != 0 || got["maximum"] != 9 {
		t.Errorf("count: %v", got)
	}
	if got := b[2].Schema(); got["type"] != "array" || got["items"].(map[string]any)["type"] != "string" {
		t.Errorf("list: %v", got)
	}
}
