package extender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// Body limits. vgpud's scheduler profile sets nodeCacheCapable, so a
// filter or prioritize body is the pod plus node names: a pod is at most
// 1.5 MiB (etcd's request limit) and 5000 names of at most 253 bytes are
// 1.3 MiB. A scheduler that sends whole Node objects instead is refused
// above this with a message saying so. A bind body is four short strings.
const (
	maxArgsBody = 4 << 20
	maxBindBody = 64 << 10
)

// FilterHandler serves kube-scheduler's filter verb over p.
func FilterHandler(p *Placer) http.HandlerFunc {
	in := newInterner()
	return func(w http.ResponseWriter, r *http.Request) {
		args, pod, ok := readArgs(w, r, in, p)
		if !ok {
			return
		}
		fits, failed, err := p.Filter(r.Context(), pod, args.names)
		res := extenderv1.ExtenderFilterResult{FailedNodes: failed}
		if err != nil {
			// The scheduler shows Error to the user.
			res.Error = err.Error()
			writeJSON(w, res)
			return
		}
		// Answer in the form asked: names for a cache-capable scheduler,
		// the Node objects it sent otherwise.
		if args.nodes == nil {
			res.NodeNames = &fits
		} else {
			res.Nodes = &corev1.NodeList{}
			keep := make(map[string]bool, len(fits))
			for _, f := range fits {
				keep[f] = true
			}
			for _, n := range args.nodes.Items {
				if keep[n.Name] {
					res.Nodes.Items = append(res.Nodes.Items, n)
				}
			}
		}
		writeJSON(w, res)
	}
}

// PrioritizeHandler serves kube-scheduler's prioritize verb over p.
func PrioritizeHandler(p *Placer) http.HandlerFunc {
	in := newInterner()
	return func(w http.ResponseWriter, r *http.Request) {
		args, pod, ok := readArgs(w, r, in, p)
		if !ok {
			return
		}
		scores, err := p.Prioritize(r.Context(), pod, args.names)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, scores)
	}
}

// PreemptHandler serves kube-scheduler's preempt verb over p. Its body
// is the pod and, per candidate node, the victims kube-scheduler chose
// (by UID: nodeCacheCapable); the answer is the victims per node that
// vgpud's rules also need.
func PreemptHandler(p *Placer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !post(w, r, "ExtenderPreemptionArgs") {
			return
		}
		// ExtenderPreemptionArgs with the pod kept raw, for Placer.Pod.
		var args struct {
			Pod                   json.RawMessage
			NodeNameToVictims     map[string]*extenderv1.Victims
			NodeNameToMetaVictims map[string]*extenderv1.MetaVictims
		}
		if !decode(w, r, maxArgsBody, "ExtenderPreemptionArgs", &args) {
			return
		}
		if len(args.Pod) == 0 || string(args.Pod) == "null" {
			http.Error(w, "ExtenderPreemptionArgs has no Pod", http.StatusBadRequest)
			return
		}
		pod, err := p.Pod(args.Pod)
		if err != nil {
			http.Error(w, "malformed ExtenderPreemptionArgs Pod: "+err.Error(), http.StatusBadRequest)
			return
		}
		proposed := args.NodeNameToMetaVictims
		if proposed == nil {
			// A scheduler that is not nodeCacheCapable sends whole pods.
			proposed = make(map[string]*extenderv1.MetaVictims, len(args.NodeNameToVictims))
			for node, v := range args.NodeNameToVictims {
				mv := &extenderv1.MetaVictims{}
				if v != nil {
					mv.NumPDBViolations = v.NumPDBViolations
					for _, vp := range v.Pods {
						if vp != nil {
							mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(vp.UID)})
						}
					}
				}
				proposed[node] = mv
			}
		}
		res, err := p.Preempt(r.Context(), pod, proposed)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: res})
	}
}

// BindHandler serves kube-scheduler's bind verb over b. A failed bind is
// an answer (ExtenderBindingResult.Error), not an HTTP error.
func BindHandler(b *Binder) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !post(w, r, "ExtenderBindingArgs") {
			return
		}
		var args extenderv1.ExtenderBindingArgs
		if !decode(w, r, maxBindBody, "ExtenderBindingArgs", &args) {
			return
		}
		if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
			http.Error(w, "ExtenderBindingArgs needs PodName, PodNamespace and Node", http.StatusBadRequest)
			return
		}
		res := extenderv1.ExtenderBindingResult{}
		if err := b.Bind(r.Context(), args); err != nil {
			res.Error = err.Error()
		}
		writeJSON(w, res)
	}
}

// extenderArgs is ExtenderArgs as vgpud reads it: the pod still as JSON (Placer.Pod
// reads it), the candidates as names whichever form they came in.
type extenderArgs struct {
	pod   json.RawMessage
	names []string
	nodes *corev1.NodeList // the Node objects, when the scheduler sent those
}

// decodeArgs reads ExtenderArgs, answering 4xx itself on bad input; names
// are interned by in. The pod's bytes may be buf's: the caller reads them
// before it gives buf back (putBody).
func decodeArgs(w http.ResponseWriter, r *http.Request, in *interner) (args extenderArgs, buf *bytes.Buffer, ok bool) {
	if !post(w, r, "ExtenderArgs") {
		return extenderArgs{}, nil, false
	}
	// ExtenderArgs with the names read by nodeNames.
	var body struct {
		Pod       json.RawMessage
		Nodes     *corev1.NodeList
		NodeNames nodeNames
	}
	body.NodeNames.intern = in
	buf, ok = readBody(w, r, maxArgsBody, "ExtenderArgs")
	if !ok {
		return extenderArgs{}, nil, false
	}
	if pod, names, set, fast := fastArgs(buf.Bytes(), in); fast {
		body.Pod, body.NodeNames.names, body.NodeNames.set = pod, names, set
	} else if err := json.Unmarshal(buf.Bytes(), &body); err != nil {
		putBody(buf)
		http.Error(w, "malformed ExtenderArgs JSON: "+err.Error(), http.StatusBadRequest)
		return extenderArgs{}, nil, false
	}
	if len(body.Pod) == 0 || string(body.Pod) == "null" {
		putBody(buf)
		http.Error(w, "ExtenderArgs has no pod", http.StatusBadRequest)
		return extenderArgs{}, nil, false
	}
	switch {
	case body.NodeNames.set:
		return extenderArgs{pod: body.Pod, names: body.NodeNames.names}, buf, true
	case body.Nodes != nil:
		names := make([]string, 0, len(body.Nodes.Items))
		for _, n := range body.Nodes.Items {
			names = append(names, n.Name)
		}
		return extenderArgs{pod: body.Pod, names: names, nodes: body.Nodes}, buf, true
	}
	putBody(buf)
	http.Error(w, "ExtenderArgs has neither NodeNames nor Nodes; send the candidate nodes (vgpud's scheduler profile sets nodeCacheCapable: true)", http.StatusBadRequest)
	return extenderArgs{}, nil, false
}

// readArgs is decodeArgs and the pod read from them (Placer.Pod), answering
// 4xx itself on bad input.
func readArgs(w http.ResponseWriter, r *http.Request, in *interner, p *Placer) (extenderArgs, *slimpod.Pod, bool) {
	args, buf, ok := decodeArgs(w, r, in)
	if !ok {
		return extenderArgs{}, nil, false
	}
	// The pod is read, and copied where it must be, while its bytes are
	// buf's: most calls find it in the informer, and a copy of the body's
	// pod for each was a tenth of what a filter allocated.
	pod, err := p.Pod(args.pod)
	args.pod = nil
	putBody(buf)
	if err != nil {
		http.Error(w, "malformed ExtenderArgs Pod: "+err.Error(), http.StatusBadRequest)
		return extenderArgs{}, nil, false
	}
	return args, pod, true
}

func post(w http.ResponseWriter, r *http.Request, what string) bool {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST with a JSON "+what+" body", http.StatusMethodNotAllowed)
		return false
	}
	return true
}

// bodies are request buffers, reused: kube-scheduler's filter body is
// tens of KB (1000 node names), and a decoder's buffer grown for each
// call was most of what a call allocated.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody bounds the buffers kept for reuse.
const maxPooledBody = 1 << 20

// readBody reads a body of at most limit bytes into a pooled buffer,
// answering 4xx itself when it cannot; putBody gives the buffer back.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, what string) (*bytes.Buffer, bool) {
	buf := bodies.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		putBody(buf)
		if tooBig := new(http.MaxBytesError); errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("%s body over %d bytes; configure the extender with nodeCacheCapable: true so kube-scheduler sends node names, not Node objects", what, limit), http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, "reading the "+what+" body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return buf, true
}

func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		buf.Reset()
		bodies.Put(buf)
	}
}

// decode reads one JSON value of at most limit bytes into v.
func decode(w http.ResponseWriter, r *http.Request, limit int64, what string, v any) bool {
	buf, ok := readBody(w, r, limit, what)
	if !ok {
		return false
	}
	defer putBody(buf)
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		http.Error(w, "malformed "+what+" JSON: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// writeJSON answers v with its length: net/http chunks an answer it
// cannot size (a filter's is tens of KB), and each chunk and the last
// were writes of their own on the connection.
func writeJSON(w http.ResponseWriter, v any) {
	buf := bodies.Get().(*bytes.Buffer)
	defer putBody(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		http.Error(w, "encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}
