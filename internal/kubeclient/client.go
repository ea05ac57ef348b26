// Package kubeclient is the process's connection to the apiserver: the
// API groups vgpud calls, one connection pool and one rate limit.
package kubeclient

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
)

// Clients are the API groups vgpud calls, and no others: the whole
// clientset would link every group's client into the binary (about 5 MB,
// resident on every node).
type Clients struct {
	Core         *corev1client.CoreV1Client
	Coordination *coordinationv1client.CoordinationV1Client
	Events       *eventsv1client.EventsV1Client
	Admission    *admissionregistrationv1client.AdmissionregistrationV1Client
	Apps         *appsv1client.AppsV1Client
	Authn        *authnv1client.AuthenticationV1Client
	Authz        *authzv1client.AuthorizationV1Client
	Discovery    *discovery.DiscoveryClient
	// DRA is what the DRA driver's kubelet plugin calls through the
	// whole interface: only the groups it uses (newDRAClients).
	DRA kubernetes.Interface
}

// New builds the process's clients, sharing one connection pool and rate
// limit; count wraps their transport, and userAgent names the process.
func New(o Options, userAgent string, count func(http.RoundTripper) http.RoundTripper) (Clients, error) {
	kubeconfig, qps := o.Kubeconfig, o.KubeAPIQPS
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client config (set --kubeconfig outside a cluster): %w", err)
	}
	// A bind is two writes (the Binding, and the Event off its path);
	// client-go's default 5 QPS, or even 200, would cap binds well below
	// what the apiserver takes (bench/runs.md).
	rc.QPS, rc.Burst = float32(qps), 2*qps
	rc.Wrap(count)
	rc.UserAgent = userAgent
	// Protobuf, as kube-scheduler and kubelet talk: every type vgpud reads
	// or writes is built in, and decoding the pod LIST and watch events in
	// protobuf costs the leader far less CPU and heap than JSON.
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	// As kubernetes.NewForConfig does: one HTTP client and one rate
	// limiter behind every group.
	if rc.RateLimiter == nil && rc.QPS > 0 {
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	var c Clients
	if c.Discovery, err = discovery.NewDiscoveryClientForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes discovery client: %w", err)
	}
	if c.Core, err = corev1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes core/v1 client: %w", err)
	}
	if c.DRA, err = newDRAClients(rc, hc, c.Core); err != nil {
		return Clients{}, err
	}
	if c.Coordination, err = coordinationv1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes coordination/v1 client: %w", err)
	}
	if c.Events, err = eventsv1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes events/v1 client: %w", err)
	}
	if c.Admission, err = admissionregistrationv1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes admissionregistration/v1 client: %w", err)
	}
	if c.Apps, err = appsv1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes apps/v1 client: %w", err)
	}
	if c.Authn, err = authnv1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes authentication/v1 client: %w", err)
	}
	if c.Authz, err = authzv1client.NewForConfigAndClient(rc, hc); err != nil {
		return Clients{}, fmt.Errorf("kubernetes authorization/v1 client: %w", err)
	}
	return c, nil
}
