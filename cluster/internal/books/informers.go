package books

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// Watch feeds the ledger from the pod and node informers, whose transform
// must be Transform. Start them afterwards. The returned func reports when the ledger is
// complete: the handlers, not only the informers' stores, have seen the
// initial list.
func (c *Ledger) Watch(podInformer, nodeInformer cache.SharedIndexInformer, log *slog.Logger) (func() bool, error) {
	setPod := func(obj any) {
		if p, ok := obj.(*slimpod.Pod); ok {
			if err := c.SetPod(p); err != nil {
				log.Error("pod not booked", "err", err)
			}
		}
	}
	podReg, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    setPod,
		UpdateFunc: func(_, obj any) { setPod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*slimpod.Pod); ok {
				c.DeletePod(p.UID)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	setNode := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			c.SetNode(n)
		}
	}
	nodeReg, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    setNode,
		UpdateFunc: func(_, obj any) { setNode(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				c.DeleteNode(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return func() bool { return podReg.HasSynced() && nodeReg.HasSynced() }, nil
}
