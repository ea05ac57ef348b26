//go:build bench

// Command nodefloor is the memory floor of any node role built from the
// libraries vgpud is held to: it links only what every replica must run
// (client-go's typed core and coordination clients and Lease election,
// kubelet's device-plugin gRPC API, go-nvml, fsnotify), runs their package
// initialisation, and sleeps, handing its start-up pages back after 10 s
// as vgpud does; with --nvml it also opens the driver's NVML and lists
// the GPUs (for a GPU machine). make bench builds it as bin/vgpud
// is built and reads its RSS next to the node-only daemon's: the binary's
// mapped pages are most of both.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/internal/exepages"
)

func main() {
	// One P, as vgpud's replica runs (daemonProcs in its main.go): the
	// floor is held to the same runtime.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	// Typed clients only, as vgpud builds them: resourcelock.NewFromKubeconfig
	// would link the whole clientset.
	leases := coordinationv1client.NewForConfigOrDie(cfg)
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "ns", Name: "floor"}, Client: leases, LockConfig: resourcelock.ResourceLockConfig{Identity: "floor"}}
	if _, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}}); err != nil {
		fmt.Fprintln(os.Stderr, "elector:", err)
	}
	_ = corev1client.NewForConfigOrDie(cfg)
	lib := nvml.New() // the library handle only: no driver on the bench machines
	if len(os.Args) > 1 && os.Args[1] == "--nvml" {
		// On a GPU machine: load the driver's library and ask what the node
		// role asks, so the floor includes NVML's own memory.
		if ret := lib.Init(); ret != nvml.SUCCESS {
			fmt.Fprintln(os.Stderr, "nvml:", nvml.ErrorString(ret))
			os.Exit(1)
		}
		n, _ := lib.DeviceGetCount()
		for i := range n {
			d, _ := lib.DeviceGetHandleByIndex(i)
			_, _ = d.GetUUID()
			_, _ = d.GetMemoryInfo()
		}
		fmt.Println("nvml: GPUs", n)
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		defer w.Close()
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, pluginapi.UnimplementedDevicePluginServer{})
	fmt.Println("ready")
	// As vgpud does once its roles started (internal/exepages), so that
	// the floor's steady memory compares with the replica's.
	time.Sleep(10 * time.Second)
	if _, err := exepages.Release(); err != nil {
		fmt.Println("release:", err) // the bench's row says so
	}
	fmt.Println("released")
	time.Sleep(time.Hour)
}
