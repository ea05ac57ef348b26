package cluster

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
)

// claimTemplates makes the webhook's claim templates over the API: one
// read per converted pod, and a create for the first pod of a shape in a
// namespace.
type claimTemplates struct {
	api resourcev1client.ResourceClaimTemplatesGetter
}

// Ensure makes t in namespace unless it is there as given. One of that
// name that holds anything else (a tenant's, made or changed to get its
// pods more than they ask) is refused, not used.
func (c claimTemplates) Ensure(ctx context.Context, namespace string, t *resourceapi.ResourceClaimTemplate) error {
	api := c.api.ResourceClaimTemplates(namespace)
	got, err := api.Get(ctx, t.Name, metav1.GetOptions{})
	made := false
	if apierrors.IsNotFound(err) {
		got, err = api.Create(ctx, t, metav1.CreateOptions{})
		made = err == nil
		if apierrors.IsAlreadyExists(err) {
			got, err = api.Get(ctx, t.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("ResourceClaimTemplate %s/%s: %w", namespace, t.Name, err)
	}
	switch {
	case made && !apiequality.Semantic.DeepEqual(got.Spec, t.Spec):
		// Fields of a feature the apiserver has off are dropped on
		// create, not refused.
		return fmt.Errorf("the apiserver kept only part of ResourceClaimTemplate %s/%s as vgpud made it: its consumable capacity (Kubernetes 1.36 and later, or the DRAConsumableCapacity feature gate) is off, and claims there cannot ask a share of a GPU", namespace, t.Name)
	case !apiequality.Semantic.DeepEqual(got.Spec, t.Spec):
		return fmt.Errorf("ResourceClaimTemplate %s/%s is not the one vgpud makes for this request (someone wrote another of that name): delete it, and create the pod again", namespace, t.Name)
	}
	return nil
}
