package extender

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/core"
	"github.com/vgpud/vgpud/protocol"
)

// maxBody bounds a request: a full NodeList of thousands of nodes is a few MiB.
const maxBody = 64 << 20

// Nodes is the cache as the handlers need it.
type Nodes interface {
	Node(name string) (core.Node, *core.Reason)
}

// Handlers serve /filter and /prioritize.
type Handlers struct {
	nodes    Nodes
	names    protocol.ResourceNames
	defaults Defaults
	events   func(pod *corev1.Pod, reason, message string)
	log      *slog.Logger
}

// New returns the handlers. events may be nil (no Events).
func New(nodes Nodes, names protocol.ResourceNames, d Defaults, events func(pod *corev1.Pod, reason, message string), log *slog.Logger) *Handlers {
	if events == nil {
		events = func(*corev1.Pod, string, string) {}
	}
	return &Handlers{nodes: nodes, names: names, defaults: d, events: events, log: log}
}

// decodeArgs reads ExtenderArgs, answering 4xx itself on bad input.
func decodeArgs(w http.ResponseWriter, r *http.Request) (*extenderv1.ExtenderArgs, []string, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST with a JSON ExtenderArgs body", http.StatusMethodNotAllowed)
		return nil, nil, false
	}
	var args extenderv1.ExtenderArgs
	body := http.MaxBytesReader(w, r.Body, maxBody)
	if err := json.NewDecoder(body).Decode(&args); err != nil {
		http.Error(w, "malformed ExtenderArgs JSON: "+err.Error(), http.StatusBadRequest)
		return nil, nil, false
	}
	_, _ = io.Copy(io.Discard, body)
	if args.Pod == nil {
		http.Error(w, "ExtenderArgs has no pod", http.StatusBadRequest)
		return nil, nil, false
	}
	var names []string
	switch {
	case args.NodeNames != nil:
		names = *args.NodeNames
	case args.Nodes != nil:
		for _, n := range args.Nodes.Items {
			names = append(names, n.Name)
		}
	}
	return &args, names, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Filter keeps the nodes the pod fits and says why for each other one.
func (h *Handlers) Filter(w http.ResponseWriter, r *http.Request) {
	args, names, ok := decodeArgs(w, r)
	if !ok {
		return
	}
	req, _, err := requestFor(args.Pod, h.names, h.defaults)
	if err != nil {
		// The scheduler shows Error to the user; nothing fits an unreadable pod.
		writeJSON(w, extenderv1.ExtenderFilterResult{Error: fmt.Sprintf("pod %s/%s: %v", args.Pod.Namespace, args.Pod.Name, err)})
		return
	}
	fits := make([]string, 0, len(names))
	failed := extenderv1.FailedNodesMap{}
	reasons := map[string]core.Reason{}
	for _, name := range names {
		n, reason := h.nodes.Node(name)
		if reason == nil {
			reason = core.Fits(n, req, h.defaults.Options)
		}
		if reason != nil {
			failed[name] = reason.Text
			reasons[name] = *reason
			continue
		}
		fits = append(fits, name)
	}
	res := extenderv1.ExtenderFilterResult{FailedNodes: failed}
	if args.NodeNames != nil {
		res.NodeNames = &fits
	} else {
		res.Nodes = &corev1.NodeList{}
		keep := make(map[string]bool, len(fits))
		for _, f := range fits {
			keep[f] = true
		}
		for _, n := range args.Nodes.Items {
			if keep[n.Name] {
				res.Nodes.Items = append(res.Nodes.Items, n)
			}
		}
	}
	if len(reasons) > 0 {
		h.events(args.Pod, "FilteredNodes", core.Summarize(len(names), len(fits), reasons))
	}
	writeJSON(w, res)
}

// Prioritize scores the nodes 0..10 by node policy.
func (h *Handlers) Prioritize(w http.ResponseWriter, r *http.Request) {
	args, names, ok := decodeArgs(w, r)
	if !ok {
		return
	}
	req, nodePolicy, err := requestFor(args.Pod, h.names, h.defaults)
	if err != nil {
		http.Error(w, fmt.Sprintf("pod %s/%s: %v", args.Pod.Namespace, args.Pod.Name, err), http.StatusBadRequest)
		return
	}
	out := make(extenderv1.HostPriorityList, 0, len(names))
	for _, name := range names {
		var score int64
		if n, reason := h.nodes.Node(name); reason == nil {
			if res, reason := core.Fit(n, req, h.defaults.Options); reason == nil {
				score = int64(core.Score(n, res.Footprint, nodePolicy))
			}
		}
		out = append(out, extenderv1.HostPriority{Host: name, Score: score})
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Host < out[b].Host })
	writeJSON(w, out)
}
