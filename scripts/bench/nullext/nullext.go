//go:build bench

// Package nullext is the extender protocol served with as little work as
// a binding extender can do: the floors make bench holds vgpud to (the
// pipeline's in-process extender, the leader floor's --extender-listen)
// answer with these, so they are the same floor. It imports no more than
// the leader floor already links, whose RSS is a floor too.
package nullext

import (
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Filter passes the first candidate node without reading the pod: one
// node back, so kube-scheduler's scoring runs over one node (vgpud
// answers with the nodes its policy ranks first, usually one).
func Filter(w http.ResponseWriter, r *http.Request) {
	var args struct{ NodeNames []string }
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil || len(args.NodeNames) == 0 {
		http.Error(w, fmt.Sprintf("no node names: %v", err), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"NodeNames":[%q]}`, args.NodeNames[0])
}

// Binding reads a /bind body as the Binding it asks for; on an error it
// has answered the call.
func Binding(w http.ResponseWriter, r *http.Request) (*corev1.Binding, bool) {
	var args struct {
		PodName, PodNamespace, Node string
		PodUID                      types.UID
	}
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: args.PodName, Namespace: args.PodNamespace, UID: args.PodUID}, Target: corev1.ObjectReference{Kind: "Node", Name: args.Node}}, true
}

// Bound answers a /bind with the Binding's outcome.
func Bound(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		_ = json.NewEncoder(w).Encode(map[string]string{"Error": err.Error()})
		return
	}
	fmt.Fprint(w, `{}`)
}
