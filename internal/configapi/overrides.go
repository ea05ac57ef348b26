package configapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// node-overrides.yaml: entries that each select nodes by name or by label
// and set some of the node role's settings for them.
//
//	version: v1
//	nodes:
//	- name: gpu-a
//	  split: 4
//	- selector:
//	    matchLabels: {nvidia.com/gpu.product: NVIDIA-L4}
//	  split: 2

// NodeEntry is one entry of node-overrides.yaml.
type NodeEntry struct {
	Name     string
	Selector *metav1.LabelSelector
	values   reflect.Value // the decoded entry: name, selector, then a field per setting
}

// Apply sets the entry's values onto settings, which are those Overrides
// read the file by, bound to another copy.
func (e NodeEntry) Apply(settings []Setting) { set(e.values, 2, settings) }

// Path names entry i in errors.
func Path(i int) string { return fmt.Sprintf("nodes[%d]", i) }

// ErrNeedsLabels is Select's answer, with no labels func, for a file that
// selects by label and names no entry for the node.
var ErrNeedsLabels = errors.New("the node's labels are needed to select its entry")

// Overrides reads node-overrides.yaml (Read's rules) into its entries,
// by settings: each entry selects by name or by a non-empty selector,
// not both, sets only settings' keys, and no name is listed twice.
func Overrides(raw []byte, settings []Setting) ([]NodeEntry, error) {
	// "nodes:" with every entry gone (commented out, say) is no entry.
	doc, j, err := read(raw, "nodes")
	if err != nil {
		return nil, err
	}
	if err := known(doc, nil, "", "nodes"); err != nil {
		return nil, fmt.Errorf("%w: want version and nodes: [{name or selector, and %s}] (docs/settings.md)", err, Keys(settings))
	}
	// No nodes key, or none listed: no entries, every node on the flags.
	var nodes []Document
	if raw, ok := doc["nodes"]; ok {
		if err := json.Unmarshal(raw, &nodes); err != nil {
			return nil, errors.New("nodes: want a list of entries, each a name or selector and the settings to change")
		}
	}
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("%s: want a mapping", Path(i))
		}
		if err := known(n, settings, Path(i), "name", "selector"); err != nil {
			return nil, err
		}
	}
	entry := reflect.StructOf(append([]reflect.StructField{
		{Name: "Name", Type: reflect.TypeFor[string](), Tag: `json:"name,omitempty"`},
		{Name: "Selector", Type: reflect.TypeFor[*metav1.LabelSelector](), Tag: `json:"selector,omitempty"`},
	}, fields(settings)...))
	file := reflect.New(reflect.StructOf([]reflect.StructField{
		{Name: "Version", Type: reflect.TypeFor[string](), Tag: `json:"version"`},
		{Name: "Nodes", Type: reflect.SliceOf(entry), Tag: `json:"nodes"`},
	}))
	if err := decodeStrict(raw, j, file); err != nil {
		return nil, fmt.Errorf("want nodes: [{name or selector, and %s}]: %w", types(settings), err)
	}
	list := file.Elem().Field(1)
	entries := make([]NodeEntry, list.Len())
	names := map[string]bool{}
	for i := range entries {
		v := list.Index(i)
		e := NodeEntry{Name: v.Field(0).String(), Selector: v.Field(1).Interface().(*metav1.LabelSelector), values: v}
		switch {
		case e.Name == "" && e.Selector == nil:
			return nil, fmt.Errorf("%s has neither name nor selector", Path(i))
		case e.Name != "" && e.Selector != nil:
			return nil, fmt.Errorf("%s has both name and selector; give one", Path(i))
		case e.Selector != nil && len(e.Selector.MatchLabels) == 0 && len(e.Selector.MatchExpressions) == 0:
			return nil, fmt.Errorf("%s.selector is empty and would select every node; the flags are every node's settings", Path(i))
		case names[e.Name]:
			return nil, fmt.Errorf("node %s is listed twice", e.Name)
		}
		if e.Selector != nil {
			if _, err := metav1.LabelSelectorAsSelector(e.Selector); err != nil {
				return nil, fmt.Errorf("%s.selector: %w", Path(i), err)
			}
			if k := reportLabel(e.Selector); k != "" {
				return nil, fmt.Errorf("%s.selector: %s is vgpud's own report of the node, written after these settings are read and from them; select by a label of yours or GPU feature discovery's (nvidia.com/gpu.product)", Path(i), k)
			}
		}
		if e.Name != "" {
			names[e.Name] = true
		}
		entries[i] = e
	}
	return entries, nil
}

// Select returns the index of the entry that selects node, -1 for none:
// the one naming it, else the one selector matching its labels; two
// selectors matching it are an error, since their order would decide.
// labels is called only when an entry selects by label (nil:
// ErrNeedsLabels then).
func Select(entries []NodeEntry, node string, labels func() (map[string]string, error)) (int, error) {
	var bySelector []int
	for i, e := range entries {
		if e.Name == node {
			return i, nil
		}
		if e.Selector != nil {
			bySelector = append(bySelector, i)
		}
	}
	if len(bySelector) == 0 {
		return -1, nil
	}
	if labels == nil {
		return -1, ErrNeedsLabels
	}
	nodeLabels, err := labels()
	if err != nil {
		return -1, fmt.Errorf("read node %s's labels for the entries that select by label: %w", node, err)
	}
	var matched []int
	for _, i := range bySelector {
		sel, err := metav1.LabelSelectorAsSelector(entries[i].Selector)
		if err != nil {
			return -1, fmt.Errorf("%s.selector: %w", Path(i), err)
		}
		if sel.Matches(k8slabels.Set(nodeLabels)) {
			matched = append(matched, i)
		}
	}
	switch len(matched) {
	case 0:
		return -1, nil
	case 1:
		return matched[0], nil
	}
	return -1, fmt.Errorf("%s and %s both select node %s by label; make the selectors exclusive or name the node", Path(matched[0]), Path(matched[1]), node)
}

// reportLabel is a label of wellknown.NodeReportLabels that sel selects
// by, "" for none.
func reportLabel(sel *metav1.LabelSelector) string {
	keys := slices.Collect(maps.Keys(sel.MatchLabels))
	for _, r := range sel.MatchExpressions {
		keys = append(keys, r.Key)
	}
	for _, k := range keys {
		if slices.Contains(wellknown.NodeReportLabels(), k) {
			return k
		}
	}
	return ""
}
