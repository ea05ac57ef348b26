package leader

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// podLabel sets and removes vgpud.io/role=leader on this replica's own pod.
type podLabel struct {
	pods      corev1client.PodsGetter
	namespace string
	name      string
}

func (p *podLabel) set(ctx context.Context) error {
	return p.patch(ctx, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, wellknown.LabelRole, wellknown.RoleLeader))
}

// remove is idempotent, and a pod that is gone has no label to remove.
func (p *podLabel) remove(ctx context.Context) error {
	err := p.patch(ctx, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, wellknown.LabelRole))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (p *podLabel) patch(ctx context.Context, body string) error {
	_, err := p.pods.Pods(p.namespace).Patch(ctx, p.name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch pod %s/%s label %s: %w", p.namespace, p.name, wellknown.LabelRole, err)
	}
	return nil
}

func metaFor(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

// clearOthers removes the leader label from every other pod in the
// namespace: a leader killed with SIGKILL never removed its own, and the
// Service must route to exactly one replica.
func (p *podLabel) clearOthers(ctx context.Context) error {
	sel := wellknown.LabelRole + "=" + wellknown.RoleLeader
	pods, err := p.pods.Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list pods %s in %s: %w", sel, p.namespace, err)
	}
	for _, pod := range pods.Items {
		if pod.Name == p.name {
			continue
		}
		other := podLabel{pods: p.pods, namespace: p.namespace, name: pod.Name}
		if err := other.remove(ctx); err != nil {
			return err
		}
	}
	return nil
}
