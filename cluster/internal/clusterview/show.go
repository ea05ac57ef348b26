package clusterview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Outputs are what Options.Output may be, as kubectl's -o.
var Outputs = []string{"", "wide", "json", "yaml"}

// Options say where the cluster view reads from and what it shows.
type Options struct {
	// Kubeconfig and Context pick the cluster as kubectl does ("":
	// KUBECONFIG, ~/.kube/config, or the pod's own ServiceAccount inside
	// the cluster; its current context).
	Kubeconfig, Context string
	// Namespace and Node narrow what is shown ("": all).
	Namespace, Node string
	// Output is "" (tables), wide, json or yaml.
	Output    string
	Scheduler string
	// ClaimClass is the DeviceClass whose claims quota charges.
	ClaimClass string
	UserAgent  string
}

// Inspect prints the cluster as vgpud books it, read from the API.
func Show(ctx context.Context, o Options, names wellknown.ResourceNames, stdout io.Writer) error {
	if !slices.Contains(Outputs, o.Output) {
		return cli.Exit(fmt.Sprintf("-o %q: want wide, json or yaml (or none, for tables)", o.Output), 2)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context}).ClientConfig()
	if err != nil {
		return cli.Exit("kubeconfig: "+err.Error(), 2)
	}
	rc.UserAgent = o.UserAgent
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	// The apiserver's cache ("0") is enough for a view, and spares etcd.
	// One node's view lists that node and its pods only; a namespace's
	// lists every pod, since what is free on a GPU is every pod's doing.
	nodeList, podList := metav1.ListOptions{ResourceVersion: "0"}, metav1.ListOptions{ResourceVersion: "0"}
	if o.Node != "" {
		nodeList.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.Node).String()
		podList.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", o.Node).String()
	}
	nodes, err := core.Nodes().List(ctx, nodeList)
	if err != nil {
		return cli.Exit("list nodes: "+err.Error(), 1)
	}
	if o.Node != "" && len(nodes.Items) == 0 {
		return cli.Exit(fmt.Sprintf("node %q not found", o.Node), 1)
	}
	pods, err := core.Pods(metav1.NamespaceAll).List(ctx, podList)
	if err != nil {
		return cli.Exit("list pods: "+err.Error(), 1)
	}
	// A quota is the whole cluster's: one node's view shows none.
	var quotas []corev1.ResourceQuota
	if o.Node == "" {
		list, err := core.ResourceQuotas(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return cli.Exit("list resource quotas: "+err.Error(), 1)
		}
		quotas = list.Items
	}
	v := Build(nodes.Items, pods.Items, quotas, o.Scheduler, names, time.Now())
	// Claims where the cluster serves them and the reader may list them.
	if claims, err := resourcev1client.NewForConfig(rc); err == nil {
		list, err := claims.ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		switch {
		case err == nil:
			v = WithClaims(v, list.Items, o.ClaimClass)
		case !apierrors.IsNotFound(err):
			v.Problems = append(v.Problems, "DRA claims not shown: list resourceclaims: "+err.Error())
		}
	}
	v = Filter(v, o.Namespace, o.Node)
	switch o.Output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		raw, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = stdout.Write(raw)
		return err
	}
	return Render(stdout, v, o.Output == "wide")
}
