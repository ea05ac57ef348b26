package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// agreesWithEncodingJSON checks that where fastArgs reads b, encoding/json
// reads it too and to the same pod bytes and names; in carries the names
// of earlier calls (strictNames compares with the last call's), and b is
// read twice, the second time against its own names.
func agreesWithEncodingJSON(t *testing.T, b []byte, in *interner) (fast bool) {
	t.Helper()
	pod, names, set, ok := fastArgs(b, in)
	if again, names2, set2, ok2 := fastArgs(b, in); ok2 != ok || !bytes.Equal(again, pod) || !slices.Equal(names2, names) || set2 != set {
		t.Fatalf("%q read twice: %q %q %v %v, then %q %q %v %v", b, pod, names, set, ok, again, names2, set2, ok2)
	}
	if !ok {
		return false
	}
	var body struct {
		Pod       json.RawMessage
		Nodes     *corev1.NodeList
		NodeNames nodeNames
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("fastArgs read %q, which encoding/json refuses: %v", b, err)
	}
	if !bytes.Equal(pod, body.Pod) || !slices.Equal(names, body.NodeNames.names) || set != body.NodeNames.set || body.Nodes != nil {
		t.Fatalf("%q: fastArgs read pod %q names %q (set %v); encoding/json pod %q names %q (set %v) nodes %v",
			b, pod, names, set, body.Pod, body.NodeNames.names, body.NodeNames.set, body.Nodes)
	}
	return true
}

// What kube-scheduler sends takes the fast path; anything it may read
// otherwise than encoding/json does takes the general decoder.
func TestFastArgsReadsAsEncodingJSON(t *testing.T) {
	pod := fmt.Sprintf(podJSON, `"a":"x\"y","b":"caf\u00e9"`)
	in := newInterner()
	for _, c := range []struct {
		body string
		fast bool
	}{
		{`{"Pod":` + pod + `,"Nodes":null,"NodeNames":["n1","n2"]}`, true},
		{" {\n \"NodeNames\" : [ \"n1\" ,\t\"n2\" ] , \"Pod\" : " + pod + " } \n", true},
		{`{"Pod":` + pod + `,"NodeNames":[]}`, true},
		{`{"Pod":` + pod + `}`, true},
		{`{}`, true},
		{`{"Pod":null,"NodeNames":null}`, true},
		{`{"Pod":{"a":1},"Pod":{"b":[1,2,{"c":"}"}]},"NodeNames":["x"],"NodeNames":null}`, true},
		{`{"Pod":` + pod + `,"Extra":[1,true,null,"s",{"k":-1.5e3}],"NodeNames":["n"]}`, true},
		// Read otherwise, or refused: the general decoder says which.
		{`{"pod":` + pod + `,"NodeNames":["n"]}`, false},
		{`{"Pod":` + pod + `,"nodenames":["n"]}`, false},
		{`{"Pod":` + pod + `,"Nodes":{"items":[]},"NodeNames":["n"]}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["a\"b"]}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["café"]}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["a",]}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["a" "b"]}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["a",null]}`, false},
		{`{"Pod":{"a":},"NodeNames":["n"]}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["n"]} x`, false},
		{`{"Pod":` + pod + `,"NodeNames":["n"]`, false},
		{`{"P\u006fd":` + pod + `}`, false},
		{`{"Pod":1 2}`, false},
		{`[]`, false}, {`null`, false}, {``, false}, {`{`, false}, {`{"Pod"}`, false},
		// As deep as encoding/json allows a value alone, too deep in a body.
		{`{"Pod":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, false},
		{`{"Pod":` + pod + `,"NodeNames":["` + strings.Repeat(`"`, 100) + `"]}`, false},
	} {
		if got := agreesWithEncodingJSON(t, []byte(c.body), in); got != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.body, got, c.fast)
		}
	}
}

// FuzzFastArgs: for any body, fastArgs either declines or reads exactly
// what encoding/json reads.
func FuzzFastArgs(f *testing.F) {
	for _, seed := range []string{
		`{"Pod":` + fmt.Sprintf(podJSON, "") + `,"NodeNames":["full","roomy"]}`,
		`{"Pod":{"k":"v\\"}"},"Nodes":null,"NodeNames":[ "a" , "b" ]}`,
		`{"X":[{"y":"]"}],"Pod":null}`,
		`{"Pod":{},"NodeNames":["n"],"Pod":"s"}`,
	} {
		f.Add(seed)
	}
	in := newInterner()
	f.Fuzz(func(t *testing.T, body string) {
		agreesWithEncodingJSON(t, []byte(body), in)
	})
}

// A filter body of 1000 names reads without encoding/json.
func BenchmarkFilterArgs(b *testing.B) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
	}
	raw, _ := json.Marshal(map[string]any{"Pod": json.RawMessage(fmt.Sprintf(podJSON, "")), "NodeNames": names})
	in := newInterner()
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, ok := fastArgs(raw, in); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var body struct {
				Pod       json.RawMessage
				Nodes     *corev1.NodeList
				NodeNames nodeNames
			}
			body.NodeNames.intern = in
			if err := json.Unmarshal(raw, &body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
