//go:build bench

// Command leaderfloor is the memory floor of any leader that keeps the
// books vgpud keeps: it watches what vgpud's leader watches (every pod,
// node and ResourceQuota) with client-go's shared informers, indexed by
// namespace and over protobuf as vgpud's are, keeps each object whole,
// and does nothing else. make bench reads its RSS next to the leader's,
// at the same 1000 nodes and 20000 pods.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	infs := []toolscache.SharedIndexInformer{
		informer(core, &corev1.Pod{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Pods("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Pods("").Watch(ctx, o)
			}),
		informer(core, &corev1.Node{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Nodes().Watch(ctx, o)
			}),
		informer(core, &corev1.ResourceQuota{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.ResourceQuotas("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.ResourceQuotas("").Watch(ctx, o)
			}),
	}
	for _, inf := range infs {
		go inf.RunWithContext(ctx)
	}
	for _, inf := range infs {
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			os.Exit(1)
		}
	}
	fmt.Println("synced", len(infs[0].GetStore().ListKeys()), "pods", len(infs[1].GetStore().ListKeys()), "nodes")
	time.Sleep(time.Hour)
}

func informer(client any, obj runtime.Object, list toolscache.ListWithContextFunc, w toolscache.WatchFuncWithContext) toolscache.SharedIndexInformer {
	lw := toolscache.ToListWatcherWithWatchListSemantics(&toolscache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: w}, client)
	return toolscache.NewSharedIndexInformerWithOptions(lw, obj, toolscache.SharedIndexInformerOptions{
		Indexers: toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc},
	})
}
