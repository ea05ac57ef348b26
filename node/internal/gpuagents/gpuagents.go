// Package gpuagents says which pods are a cluster administrator's GPU
// agents (DCGM exporter, the GPU operator's validators, vgpud's own): a
// pod of a named ServiceAccount in a namespace an administrator labelled
// vgpud.io/gpu-agents=true. The label, which policy vgpud-gpu-agents
// keeps to those allowed to set it, is read live from the API: a
// namespace of the same name made by anyone else carries none.
package gpuagents

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Namespaces holds the names of the namespaces labelled
// vgpud.io/gpu-agents=true, and only those: the list and watch ask the
// API for them alone, and a label taken off drops its namespace.
type Namespaces struct {
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	lastErr error // the list's or watch's latest failure, until one succeeds
}

// selector picks the agents' namespaces.
func selector() string {
	return labels.Set{wellknown.LabelGPUAgents: "true"}.String()
}

// NewNamespaces watches the labelled namespaces through c, logging each
// that is labelled or unlabelled (an audit of who holds every GPU); call
// Start.
func NewNamespaces(c corev1client.NamespacesGetter, log *slog.Logger) (*Namespaces, error) {
	sel := selector()
	// The typed client says whether it streams lists (a fake does not).
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return c.Namespaces().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return c.Namespaces().Watch(ctx, o)
		},
	}, c)
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Namespace{}, cache.SharedIndexInformerOptions{})
	// Only the name and labels are read.
	err := inf.SetTransform(func(obj any) (any, error) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, UID: ns.UID, Labels: ns.Labels, ResourceVersion: ns.ResourceVersion}}, nil
		}
		return obj, nil
	})
	if err != nil {
		return nil, fmt.Errorf("watch namespaces labelled %s: %w", sel, err)
	}
	n := &Namespaces{informer: inf}
	// A list refused (RBAC without namespaces) would otherwise only say
	// "not in yet" for ever.
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		n.mu.Lock()
		n.lastErr = err
		n.mu.Unlock()
		log.Error("list or watch of the namespaces labelled for GPU agents failed", "selector", sel, "err", err)
	}); err != nil {
		return nil, fmt.Errorf("watch namespaces labelled %s: %w", sel, err)
	}
	name := func(obj any) string {
		if ns, ok := obj.(*corev1.Namespace); ok {
			return ns.Name
		}
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return d.Key
		}
		return ""
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			n.clearErr()
			log.Info("namespace labelled "+wellknown.LabelGPUAgents+"=true: pods of its GPU agent ServiceAccounts keep every GPU", "namespace", name(obj))
		},
		DeleteFunc: func(obj any) {
			log.Info("namespace no longer labelled "+wellknown.LabelGPUAgents+"=true, or gone", "namespace", name(obj))
		},
	}); err != nil {
		return nil, fmt.Errorf("watch namespaces labelled %s: %w", sel, err)
	}
	return n, nil
}

func (n *Namespaces) clearErr() {
	n.mu.Lock()
	n.lastErr = nil
	n.mu.Unlock()
}

// HasSynced says whether the first list is in.
func (n *Namespaces) HasSynced() bool { return n.informer.HasSynced() }

// Start runs the watch until ctx ends.
func (n *Namespaces) Start(ctx context.Context) { go n.informer.RunWithContext(ctx) }

// Labelled says whether namespace ns carries vgpud.io/gpu-agents=true
// now; an error before the first list is in.
func (n *Namespaces) Labelled(ns string) (bool, error) {
	if !n.informer.HasSynced() {
		n.mu.Lock()
		last := n.lastErr
		n.mu.Unlock()
		if last != nil {
			return false, fmt.Errorf("vgpud cannot list the namespaces labelled %s=true: %w", wellknown.LabelGPUAgents, last)
		}
		return false, fmt.Errorf("vgpud's list of the namespaces labelled %s=true is not in yet", wellknown.LabelGPUAgents)
	}
	obj, ok, err := n.informer.GetStore().GetByKey(ns)
	if err != nil || !ok {
		return false, err
	}
	got, _ := obj.(*corev1.Namespace)
	return got != nil && got.Labels[wellknown.LabelGPUAgents] == "true", nil
}

// LabelledNamespaces is what Rule reads of the namespaces.
type LabelledNamespaces interface {
	Labelled(ns string) (bool, error)
	HasSynced() bool
}

// Rule is who is a GPU agent: a pod of one of Accounts in a namespace
// that Namespaces says is labelled.
type Rule struct {
	Accounts   []string
	Namespaces LabelledNamespaces
}

// Synced says whether the namespaces' first list is in.
func (r Rule) Synced() bool { return r.Namespaces == nil || r.Namespaces.HasSynced() }

// Exempt says whether a pod of namespace ns and ServiceAccount account is
// a GPU agent. An account not listed is none, whatever its namespace; a
// listed one is asked of the namespace, which may not know yet.
func (r Rule) Exempt(ns, account string) (bool, error) {
	if !slices.Contains(r.Accounts, account) || account == "" || r.Namespaces == nil {
		return false, nil
	}
	ok, err := r.Namespaces.Labelled(ns)
	if err != nil {
		return false, fmt.Errorf("namespace %s: %w", ns, err)
	}
	return ok, nil
}
