package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpud/vgpud/cluster/clusterview"
	"github.com/vgpud/vgpud/node/inspect"
	"github.com/vgpud/vgpud/protocol"
)

// runInspect prints the running daemon's view of this node.
func runInspect(ctx context.Context, socket string, asJSON, ready bool, stdout io.Writer) error {
	s, err := inspect.Fetch(ctx, socket)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	switch {
	case ready:
		if !s.Ready {
			return cli.Exit("not ready: "+s.NotReady, 1)
		}
		return nil
	case asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return inspect.Render(stdout, s)
}

// runInjectXID sends a fake XID to a mock GPU of the running daemon.
func runInjectXID(ctx context.Context, socket, spec string, stdout io.Writer) error {
	i := strings.LastIndexByte(spec, ':')
	xid, err := strconv.ParseUint(spec[i+1:], 10, 64)
	if i <= 0 || err != nil {
		return cli.Exit(fmt.Sprintf("--inject-xid=%s is invalid: want GPU:XID, e.g. 3:79", spec), 2)
	}
	if err := inspect.InjectXID(ctx, socket, spec[:i], xid); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(stdout, "XID %d delivered to GPU %s\n", xid, spec[:i])
	return nil
}

// runInspectCluster prints the whole cluster as vgpud books it, read from
// the API with the kubeconfig at path ("": KUBECONFIG, ~/.kube/config,
// or the pod's own ServiceAccount inside the cluster).
func runInspectCluster(ctx context.Context, path, scheduler string, names protocol.ResourceNames, asJSON bool, stdout io.Writer) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return cli.Exit("kubeconfig: "+err.Error(), 2)
	}
	rc.UserAgent = "vgpud-inspect/" + version
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
	v := clusterview.Build(nodes.Items, pods.Items, quotas.Items, scheduler, names)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return clusterview.Render(stdout, v)
}
