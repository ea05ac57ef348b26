package cluster

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpud/vgpud/cluster/internal/clusterview"
	"github.com/vgpud/vgpud/protocol"
)

// View is what `vgpud inspect --cluster --json` prints: the cluster as
// vgpud books it. The end-to-end and bench suites decode it.
type View = clusterview.View

// Inspect prints the whole cluster as vgpud books it, read from the API
// with the kubeconfig at path ("": KUBECONFIG, ~/.kube/config, or the pod's
// own ServiceAccount inside the cluster).
func Inspect(ctx context.Context, path, userAgent, scheduler string, names protocol.ResourceNames, asJSON bool, stdout io.Writer) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return cli.Exit("kubeconfig: "+err.Error(), 2)
	}
	rc.UserAgent = userAgent
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	// The apiserver's cache ("0") is enough for a view, and spares etcd.
	cached := metav1.ListOptions{ResourceVersion: "0"}
	nodes, err := core.Nodes().List(ctx, cached)
	if err != nil {
		return cli.Exit("list nodes: "+err.Error(), 1)
	}
	pods, err := core.Pods(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return cli.Exit("list pods: "+err.Error(), 1)
	}
	quotas, err := core.ResourceQuotas(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return cli.Exit("list resource quotas: "+err.Error(), 1)
	}
	v := clusterview.Build(nodes.Items, pods.Items, quotas.Items, scheduler, names, time.Now())
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return clusterview.Render(stdout, v)
}
