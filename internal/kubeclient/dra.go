package kubeclient

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	resourcev1beta1 "k8s.io/client-go/kubernetes/typed/resource/v1beta1"
	resourcev1beta2 "k8s.io/client-go/kubernetes/typed/resource/v1beta2"
	"k8s.io/client-go/rest"
)

// draClients is the kubernetes.Interface the DRA helpers take, serving
// only the groups they call (claims, slices and classes in each
// resource.k8s.io version, and the Node that owns the slices): a whole
// Clientset would link every group's client, about 9 MB of the binary,
// and its pages are the node role's memory. Any other group is nil.
type draClients struct {
	kubernetes.Interface
	core    *corev1client.CoreV1Client
	v1      *resourcev1.ResourceV1Client
	v1beta1 *resourcev1beta1.ResourceV1beta1Client
	v1beta2 *resourcev1beta2.ResourceV1beta2Client
}

func (c draClients) CoreV1() corev1client.CoreV1Interface                      { return c.core }
func (c draClients) ResourceV1() resourcev1.ResourceV1Interface                { return c.v1 }
func (c draClients) ResourceV1beta1() resourcev1beta1.ResourceV1beta1Interface { return c.v1beta1 }
func (c draClients) ResourceV1beta2() resourcev1beta2.ResourceV1beta2Interface { return c.v1beta2 }

// newDRAClients builds them on the process's connections.
func newDRAClients(rc *rest.Config, hc *http.Client, core *corev1client.CoreV1Client) (kubernetes.Interface, error) {
	c := draClients{core: core}
	var err error
	if c.v1, err = resourcev1.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("kubernetes resource/v1 client: %w", err)
	}
	if c.v1beta1, err = resourcev1beta1.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("kubernetes resource/v1beta1 client: %w", err)
	}
	if c.v1beta2, err = resourcev1beta2.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("kubernetes resource/v1beta2 client: %w", err)
	}
	return c, nil
}
