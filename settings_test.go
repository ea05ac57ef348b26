package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/vgpud/vgpud/cluster"
	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/node"
)

// sliceFlagFields are the list flags, which urfave/cli cannot bind to a
// plain slice (their Action sets it), by the field they fill.
var sliceFlagFields = map[string]string{"roles": "Roles", "exclude-gpus": "ExcludeGPUs", "health-ignore-xids": "HealthIgnoreXIDs", "gpu-agent-accounts": "GPUAgentAccounts", "nri-early-namespaces": "NRIEarlyNamespaces", "mig-on-demand": "MIGOnDemand", "mig-on-demand-profiles": "MIGOnDemandProfiles", "webhook-hook-optional-namespaces": "HookOptionalNamespaces"}

// Every flag sets the field of its own name (--allocate-wait sets
// AllocateWait, --tls-cert-validity sets TLS.CertValidity), so a reader
// finds a setting under one name from the command line to the code.
func TestEveryFlagSetsTheFieldOfItsName(t *testing.T) {
	cfg := defaultConfig()
	fields := fieldsByAddress(reflect.ValueOf(&cfg).Elem(), "")
	owners := fieldOwners(reflect.TypeOf(cfg), "")
	for _, g := range flagGroups(&cfg) {
		for _, f := range visible(g.flags) {
			name := f.Names()[0]
			path := flagField(f, fields, owners)
			if path == "" {
				t.Errorf("--%s sets no field", name)
				continue
			}
			last := path[strings.LastIndex(path, ".")+1:]
			if !strings.HasSuffix(strings.ReplaceAll(name, "-", ""), strings.ToLower(last)) {
				t.Errorf("--%s sets %s: name one after the other", name, path)
			}
		}
	}
}

// visible are the flags of the settings: a hidden one is a retired name,
// kept only to say what replaced it.
func visible(flags []cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); !ok || v.IsVisible() {
			out = append(out, f)
		}
	}
	return out
}

// flagField is the path of the field f sets: its Destination's, or, for a
// list flag (set by its Action), the field sliceFlagFields names, found
// among paths; "" for none.
func flagField(f cli.Flag, fields map[uintptr]string, paths map[string]string) string {
	if dest := reflect.ValueOf(f).Elem().FieldByName("Destination"); dest.IsValid() && !dest.IsNil() {
		return fields[dest.Pointer()]
	}
	field, ok := sliceFlagFields[f.Names()[0]]
	if !ok {
		return ""
	}
	for p := range paths {
		if strings.HasSuffix(p, "."+field) {
			return p
		}
	}
	return ""
}

// fieldsByAddress maps the address of every field under v to its path.
func fieldsByAddress(v reflect.Value, prefix string) map[uintptr]string {
	out := map[uintptr]string{}
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		path := prefix + sf.Name
		out[f.Addr().Pointer()] = path
		if f.Kind() == reflect.Struct {
			for a, p := range fieldsByAddress(f, path+".") {
				if _, ok := out[a]; !ok || strings.Count(p, ".") > strings.Count(out[a], ".") {
					out[a] = p // a struct's first field shares its address
				}
			}
		}
	}
	return out
}

// docs/settings.md's and settings-files.md's tables are rendered from
// the flags and the files' APIs; run with
// VGPUD_UPDATE_DOCS=1 to write them after changing a flag.
func TestSettingsDocTablesMatchTheFlags(t *testing.T) {
	docs := []string{"docs/settings.md", "docs/settings-files.md"}
	was := map[string]string{}
	now := map[string]string{}
	for _, doc := range docs {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		was[doc], now[doc] = string(raw), string(raw)
	}
	// render puts a block's content in the one page that has it.
	render := func(block *regexp.Regexp, what, content string) {
		found := 0
		for _, doc := range docs {
			if block.MatchString(now[doc]) {
				found++
				now[doc] = block.ReplaceAllLiteralString(now[doc], content)
			}
		}
		if found != 1 {
			t.Fatalf("%d of %v have a %s block; want one", found, docs, what)
		}
	}
	cfg := defaultConfig()
	for _, g := range flagGroups(&cfg) {
		block := regexp.MustCompile(`(?s)<!-- flags: ` + g.name + ` -->\n.*?<!-- end flags -->`)
		render(block, "<!-- flags: "+g.name+" -->", "<!-- flags: "+g.name+" -->\n"+flagTable(g.flags)+"<!-- end flags -->")
	}
	// The keys of the settings files, rendered from the API (configapi).
	for file, settings := range map[string][]configapi.Setting{"cluster-settings.yaml": cluster.FileSettings(), "node-overrides.yaml": node.OverrideSettings()} {
		block := regexp.MustCompile(`(?s)<!-- file keys: ` + regexp.QuoteMeta(file) + ` -->\n.*?<!-- end file keys -->`)
		render(block, "<!-- file keys: "+file+" -->", "<!-- file keys: "+file+" -->\n"+fileKeyTable(settings)+"<!-- end file keys -->")
	}
	for _, doc := range docs {
		if now[doc] == was[doc] {
			continue
		}
		if os.Getenv("VGPUD_UPDATE_DOCS") != "" {
			if err := os.WriteFile(doc, []byte(now[doc]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s's settings tables differ from the flags; run VGPUD_UPDATE_DOCS=1 go test -run TestSettingsDocTablesMatchTheFlags .", doc)
	}
}

func flagTable(flags []cli.Flag) string {
	var b strings.Builder
	b.WriteString("| flag | default | what |\n| --- | --- | --- |\n")
	for _, f := range visible(flags) {
		doc := f.(cli.DocGenerationFlag)
		def := strings.ReplaceAll(doc.GetDefaultText(), `"`, "")
		if def != "" {
			def = "`" + def + "`"
		}
		usage := strings.ReplaceAll(doc.GetUsage(), "|", `\|`)
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Names()[0], def, usage)
	}
	return b.String()
}

// fileKeyTable is a settings file's keys, each with its type and the flag
// it overrides.
func fileKeyTable(settings []configapi.Setting) string {
	var b strings.Builder
	b.WriteString("| key | type | overrides |\n| --- | --- | --- |\n")
	for _, s := range settings {
		typ, items := s.Type()
		if items != "" {
			typ = "list of " + items + "s"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `--%s` |\n", s.Key, typ, s.Flag)
	}
	return b.String()
}

// docs/settings-map.md names, for every flag of vgpud run, the part that
// owns it (the package whose Options declare it) and the field it sets;
// it is rendered from the flags, and VGPUD_UPDATE_DOCS=1 writes it.
func TestSettingsMapIsCurrent(t *testing.T) {
	const doc = "docs/settings-map.md"
	cfg := defaultConfig()
	fields := fieldsByAddress(reflect.ValueOf(&cfg).Elem(), "")
	owners := fieldOwners(reflect.TypeOf(cfg), "")
	var b strings.Builder
	b.WriteString("# Settings map\n\nEvery flag of `vgpud run`, the part that owns it (the package whose `Options` declare its default, flag and check) and the field of `vgpud run`'s settings it sets. A setting is changed in its part alone. Rendered from the flags by `settings_test.go`; [settings.md](settings.md) says what each does.\n\n")
	b.WriteString("| flag | part | field |\n| --- | --- | --- |\n")
	for _, g := range flagGroups(&cfg) {
		for _, f := range visible(g.flags) {
			name := f.Names()[0]
			path := flagField(f, fields, owners)
			owner, ok := owners[path]
			if !ok {
				t.Fatalf("--%s: no field found", name)
			}
			fmt.Fprintf(&b, "| `--%s` | `%s` | `%s` |\n", name, owner, path)
		}
	}
	want := b.String()
	got, _ := os.ReadFile(doc)
	if string(got) == want {
		return
	}
	if os.Getenv("VGPUD_UPDATE_DOCS") != "" {
		if err := os.WriteFile(doc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not the flags' map; run VGPUD_UPDATE_DOCS=1 go test -run TestSettingsMapIsCurrent .", doc)
}

// fieldOwners maps every field path under typ to the package, relative
// to the module, of the struct declaring the field, or, for a shared
// contract's type (protocol's), of the part holding it: the part whose
// flags set it.
func fieldOwners(typ reflect.Type, prefix string) map[string]string {
	return ownersUnder(typ, prefix, ".")
}

func ownersUnder(typ reflect.Type, prefix, owner string) map[string]string {
	if pkg := strings.TrimPrefix(strings.TrimPrefix(typ.PkgPath(), "github.com/vgpud/vgpud"), "/"); pkg != "" && !strings.HasPrefix(pkg, "protocol") {
		owner = pkg
	}
	out := map[string]string{}
	for i := range typ.NumField() {
		sf := typ.Field(i)
		path := prefix + sf.Name
		out[path] = owner
		if sf.Type.Kind() == reflect.Struct && strings.HasPrefix(sf.Type.PkgPath(), "github.com/vgpud/vgpud") {
			for p, o := range ownersUnder(sf.Type, path+".", owner) {
				out[p] = o
			}
		}
	}
	return out
}

// The chart's nodeOverrides, in its values schema, are the entries
// node-overrides.yaml takes (configapi): a name or a selector, and the
// keys a node's entry may set, each with its type and bounds;
// VGPUD_UPDATE_DOCS=1 writes them after a change.
func TestChartNodeOverridesAreTheAPIs(t *testing.T) {
	const path = "charts/vgpud/values.schema.json"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// An entry names a node or selects by label, never both, as the
	// node's reader asks (configapi.Overrides); a selector is a label
	// selector's two fields, neither empty.
	selector := `{"type": "object", "additionalProperties": false, "minProperties": 1, "properties": {` +
		`"matchLabels": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}, ` +
		`"matchExpressions": {"type": "array", "minItems": 1, "items": {"type": "object", "additionalProperties": false, "required": ["key", "operator"], "properties": {` +
		`"key": {"type": "string", "minLength": 1}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]}, "values": {"type": "array", "items": {"type": "string"}}}}}}}`
	props := []string{`          "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}`, `          "selector": ` + selector}
	for _, s := range node.OverrideSettings() {
		v, err := json.Marshal(s.Schema())
		if err != nil {
			t.Fatal(err)
		}
		props = append(props, fmt.Sprintf("          %q: %s", s.Key, v))
	}
	block := "    \"nodeOverrides\": {\n      \"type\": \"array\",\n      \"items\": {\n        \"type\": \"object\",\n        \"additionalProperties\": false,\n        \"oneOf\": [{\"required\": [\"name\"]}, {\"required\": [\"selector\"]}],\n        \"properties\": {\n" +
		strings.Join(props, ",\n") + "\n        }\n      }\n    },\n"
	text := string(raw)
	if old := regexp.MustCompile(`(?s)    "nodeOverrides": \{\n.*?\n    \},\n`).FindString(text); old != "" {
		text = strings.Replace(text, old, block, 1)
	} else {
		text = strings.Replace(text, "    \"runtime\": {\n", block+"    \"runtime\": {\n", 1)
	}
	var parsed map[string]any
	if err := json.Unmarshal([]byte(text), &parsed); err != nil {
		t.Fatalf("the schema written is not JSON: %v", err)
	}
	if text == string(raw) {
		return
	}
	if os.Getenv("VGPUD_UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's nodeOverrides are not the API's keys: run VGPUD_UPDATE_DOCS=1 go test -run TestChartNodeOverridesAreTheAPIs .", path)
}
