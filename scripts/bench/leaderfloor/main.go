//go:build bench

// Command leaderfloor is the memory floor of any leader that keeps the
// books vgpud keeps: it watches what vgpud's leader watches (every pod,
// node and ResourceQuota) with client-go's shared informers, indexed by
// namespace and over protobuf as vgpud's are, keeps each object but its
// managedFields (which any careful watcher drops), and does nothing else.
// Once synced it collects its garbage and returns it to the kernel, and
// hands its binary's start-up pages back as vgpud does, so what it holds
// then is the objects and the runtime alone. make bench
// reads its RSS next to the leader's, at the same 1000 nodes and 20000
// pods. With --extender-listen and --webhook-listen it also answers as
// an extender and as a mutating webhook with as little work as either can
// do (extender.go, webhook.go): the floors make bench holds the leader's
// CPU per pod and the webhook's cost per create to.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpud/vgpud/internal/exepages"
	// vgpud's timer slack, set before the runtime starts, as in the
	// replica: the floor's CPU per pod is held to the same runtime.
	_ "github.com/vgpud/vgpud/internal/timerslack"
)

func main() {
	// One P, as vgpud's replica runs (daemonProcs in its main.go): the
	// floor is held to the same runtime.
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(1)
	}
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig")
	extenderListen := flag.String("extender-listen", "", "also answer /filter and /bind here, as thinly as an extender can (extender.go)")
	webhookListen := flag.String("webhook-listen", "", "also answer admission reviews at /webhook here, as thinly as a mutating webhook can (webhook.go)")
	watching := flag.Bool("watch", true, "watch what the leader watches; false for a webhook alone, which needs no watch")
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
	if *watching {
		watchAll(ctx, core)
	}
	errc := make(chan error, 2)
	if *extenderListen != "" || *webhookListen != "" {
		cert, clients, err := servingTLS(ctx, core)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if *extenderListen != "" {
			go func() { errc <- fmt.Errorf("extender: %w", serveExtender(core, cert, clients, *extenderListen)) }()
		}
		if *webhookListen != "" {
			go func() { errc <- fmt.Errorf("webhook: %w", serveWebhook(cert, *webhookListen)) }()
		}
	}
	// An hour at most: a bench that died without stopping it leaves
	// nothing running long.
	select {
	case err := <-errc:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case <-time.After(time.Hour):
	}
}

// watchAll watches every pod, node and ResourceQuota until synced, then
// collects and returns its garbage and says what it holds.
func watchAll(ctx context.Context, core corev1client.CoreV1Interface) {
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
		if err := inf.SetTransform(stripManagedFields); err != nil {
			fmt.Fprintln(os.Stderr, "transform:", err)
			os.Exit(1)
		}
		go inf.RunWithContext(ctx)
	}
	for _, inf := range infs {
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			os.Exit(1)
		}
	}
	goruntime.GC()
	debug.FreeOSMemory()
	// As vgpud does once its roles started (internal/exepages): the
	// leader is read long after it handed its start-up pages back.
	_, released := exepages.Release()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	fmt.Printf("synced %d pods %d nodes, heap in use %d MiB\n", len(infs[0].GetStore().ListKeys()), len(infs[1].GetStore().ListKeys()), ms.HeapInuse>>20)
	if released != nil {
		fmt.Println("release:", released) // after the line the bench reads
	}
}

func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func informer(client any, obj runtime.Object, list toolscache.ListWithContextFunc, w toolscache.WatchFuncWithContext) toolscache.SharedIndexInformer {
	lw := toolscache.ToListWatcherWithWatchListSemantics(&toolscache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: w}, client)
	return toolscache.NewSharedIndexInformerWithOptions(lw, obj, toolscache.SharedIndexInformerOptions{
		Indexers: toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc},
	})
}
