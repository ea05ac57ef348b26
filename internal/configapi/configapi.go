// Package configapi is vgpud's settings files, one versioned API: the
// cluster settings the leader follows (cluster-settings.yaml) and the
// per-node overrides each node role reads at its start
// (node-overrides.yaml). A part declares each key a file may set with
// Bind, beside the flag it overrides; Read is the one strict reader of
// either file; and one rule puts a file over the flags: Apply decodes
// each key a file sets onto a copy of the flags' values, and a key it
// leaves out keeps the flag's.
package configapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Version is the files' format. A file that names no version is read as
// this one: node-overrides.yaml had none before v1, and a file of
// either kind written for v1 reads the same.
const Version = "v1"

// MaxBytes bounds a settings file: a ConfigMap's whole size.
const MaxBytes = 1 << 20

// A Setting is one key a file may set: the flag it overrides, and the
// field its value is decoded onto.
type Setting struct {
	Key  string
	Flag string
	typ  reflect.Type
	dst  any // *T
	// schema bounds the value in the chart's values.schema.json, beyond
	// its type; the part's Validate is what enforces them.
	schema map[string]any
}

// OneOf is s, whose value the chart's schema bounds to values.
func (s Setting) OneOf(values ...string) Setting { return s.with("enum", values) }

// Range is s, whose value the chart's schema bounds to min..max.
func (s Setting) Range(min, max int) Setting { return s.with("minimum", min).with("maximum", max) }

// Pattern is s, whose value the chart's schema bounds to the regular
// expression re.
func (s Setting) Pattern(re string) Setting { return s.with("pattern", re) }

func (s Setting) with(k string, v any) Setting {
	s.schema = maps.Clone(s.schema)
	if s.schema == nil {
		s.schema = map[string]any{}
	}
	s.schema[k] = v
	return s
}

// Schema is s's JSON Schema: its type and bounds.
func (s Setting) Schema() map[string]any {
	out := maps.Clone(s.schema)
	if out == nil {
		out = map[string]any{}
	}
	typ, items := s.Type()
	if _, enum := out["enum"]; !enum {
		out["type"] = typ
	}
	if items != "" {
		out["items"] = map[string]any{"type": items}
	}
	return out
}

// Bind is the setting of key, overriding --flag, decoded onto *dst.
func Bind[T any](key, flag string, dst *T) Setting {
	return Setting{Key: key, Flag: flag, typ: reflect.TypeFor[T](), dst: dst}
}

// Document is one file's top-level mapping, each value still encoded.
type Document map[string]json.RawMessage

// Read reads a settings file under the rules both kinds share: at most
// MaxBytes, one YAML document, a mapping whose keys are case-sensitive
// and appear once, and no null value at any depth (a key with no value
// would be read as "left out": say which was meant). An empty file, or
// one of comments alone, is an empty Document. A version other than
// Version is refused; a file with none is read as Version.
func Read(raw []byte) (Document, error) {
	doc, _, err := read(raw)
	return doc, err
}

// read is Read, where the top-level keys nullable may be null: read as
// left out. It also returns the file as JSON, for decodeStrict.
func read(raw []byte, nullable ...string) (Document, []byte, error) {
	if len(raw) > MaxBytes {
		return nil, nil, fmt.Errorf("%d bytes, more than %d", len(raw), MaxBytes)
	}
	if len(bytes.TrimSpace(uncommented(raw))) == 0 {
		return Document{}, nil, nil
	}
	if n, err := documents(raw); err != nil {
		return nil, nil, fmt.Errorf("want YAML with version: %s: %w", Version, err)
	} else if n > 1 {
		return nil, nil, fmt.Errorf("more than one YAML document: keep one, with version: %s", Version)
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("want YAML with version: %s: %w", Version, err)
	}
	var doc Document
	if err := json.Unmarshal(j, &doc); err != nil || doc == nil {
		return nil, nil, fmt.Errorf("want a YAML mapping with version: %s", Version)
	}
	for _, k := range nullable {
		if v, ok := doc[k]; ok && string(bytes.TrimSpace(v)) == "null" {
			delete(doc, k)
		}
	}
	if path, ok := firstNull(doc, ""); ok {
		return nil, nil, fmt.Errorf("%s is null: give it a value, or leave it out for its flag's", path)
	}
	if v, ok := doc["version"]; ok {
		var version string
		if err := json.Unmarshal(v, &version); err != nil || version != Version {
			return nil, nil, fmt.Errorf("version %s is not one this vgpud reads; want %s", v, Version)
		}
		delete(doc, "version")
	}
	return doc, j, nil
}

// Load reads a flat settings file (cluster-settings.yaml: version and
// settings' keys) onto settings' fields, under Read's rules; a key no
// setting has is refused, with those that are. Nothing is set unless the
// whole file reads.
func Load(raw []byte, settings []Setting) error {
	doc, j, err := read(raw)
	if err != nil {
		return err
	}
	if err := known(doc, settings, ""); err != nil {
		return err
	}
	if len(doc) == 0 {
		return nil
	}
	typ := reflect.StructOf(append([]reflect.StructField{{Name: "Version", Type: reflect.TypeFor[string](), Tag: `json:"version"`}}, fields(settings)...))
	v := reflect.New(typ)
	if err := decodeStrict(raw, j, v); err != nil {
		return fmt.Errorf("want %s: %w", types(settings), err)
	}
	set(v.Elem(), 1, settings)
	return nil
}

// decodeStrict decodes raw into v by its types, as kubectl reads YAML,
// refusing a key unknown at any depth, and, where encoding/json would
// take a key in another case (MatchLabels for matchLabels) or twice,
// that too: what the file says is what is read. j is raw as read's JSON.
func decodeStrict(raw, j []byte, v reflect.Value) error {
	if err := yaml.UnmarshalStrict(raw, v.Interface()); err != nil {
		return err
	}
	// The typed decode above read the values; this one only says whether
	// every key is the exact one (its type errors are the YAML's
	// booleans where strings are wanted, which the above read as kubectl
	// does).
	strict, _ := kjson.UnmarshalStrict(j, reflect.New(v.Elem().Type()).Interface())
	return errors.Join(strict...)
}

// known refuses a key of doc that no setting has.
func known(doc Document, settings []Setting, path string, also ...string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		if !slices.Contains(also, k) && !slices.ContainsFunc(settings, func(s Setting) bool { return s.Key == k }) {
			errs = append(errs, fmt.Errorf("%s: unknown field %q; want %s", where(path, k), k, Keys(settings)))
		}
	}
	return errors.Join(errs...)
}

// fields are a struct's fields for settings: a pointer each, nil when
// the file leaves the key out. Decoding YAML into them reads each value
// as its type: a label value true, or a string y, stays a string where
// a string is wanted, and a number is not read from a string.
func fields(settings []Setting) []reflect.StructField {
	out := make([]reflect.StructField, len(settings))
	for i, s := range settings {
		out[i] = reflect.StructField{Name: fmt.Sprintf("S%d", i), Type: reflect.PointerTo(s.typ), Tag: reflect.StructTag(fmt.Sprintf(`json:"%s,omitempty"`, s.Key))}
	}
	return out
}

// set copies the fields from the first'th on, those the file set, onto
// settings'.
func set(v reflect.Value, first int, settings []Setting) {
	for i, s := range settings {
		if f := v.Field(first + i); !f.IsNil() {
			reflect.ValueOf(s.dst).Elem().Set(f.Elem())
		}
	}
}

// types says what each setting's value is, for errors.
func types(settings []Setting) string {
	out := make([]string, len(settings))
	for i, s := range settings {
		typ, items := s.Type()
		if items != "" {
			typ += " of " + items
		}
		out[i] = s.Key + " (" + typ + ")"
	}
	return strings.Join(out, ", ")
}

// Keys lists settings' keys, for errors and help.
func Keys(settings []Setting) string {
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.Key
	}
	return strings.Join(keys, ", ")
}

// JSONType is how a setting's value is written in a file, as JSON
// Schema names it: string, integer, number, boolean or array.
func JSONType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

// Type is s's JSON type (JSONType), and for a list its items'.
func (s Setting) Type() (typ, items string) {
	if s.typ.Kind() == reflect.Slice {
		return "array", JSONType(s.typ.Elem())
	}
	return JSONType(s.typ), ""
}

func where(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// firstNull is the path of a null value in v, if any.
func firstNull(doc Document, path string) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		if p, ok := nullIn(doc[k], where(path, k)); ok {
			return p, true
		}
	}
	return "", false
}

func nullIn(raw json.RawMessage, path string) (string, bool) {
	switch t := bytes.TrimSpace(raw); {
	case string(t) == "null":
		return path, true
	case len(t) > 0 && t[0] == '{':
		var m Document
		if json.Unmarshal(t, &m) == nil {
			return firstNull(m, path)
		}
	case len(t) > 0 && t[0] == '[':
		var l []json.RawMessage
		if json.Unmarshal(t, &l) == nil {
			for i, e := range l {
				if p, ok := nullIn(e, fmt.Sprintf("%s[%d]", path, i)); ok {
					return p, true
				}
			}
		}
	}
	return "", false
}

// documents counts raw's YAML documents as a YAML parser does, whatever
// the markers look like ("--- {a: b}", CRLF, "..."): the reader reads the
// first alone, so a second would be in the file and not in force.
func documents(raw []byte) (int, error) {
	dec := yamlv2.NewDecoder(bytes.NewReader(raw))
	n := 0
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// uncommented is raw without its comment lines.
func uncommented(raw []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(raw, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// ReadFile reads a settings file of at most MaxBytes: a FIFO or a device
// in its place must not block the reader, nor a large file fill it.
func ReadFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxBytes+1))
}
