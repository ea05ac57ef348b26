package kubeclient

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The flags of Options.
const (
	FlagKubeconfig = "kubeconfig"
	FlagKubeAPIQPS = "kube-api-qps"
)

// Bounds of --kube-api-qps.
const (
	MinAPIQPS = 1
	MaxAPIQPS = 100000
)

// Options are how the process reaches the apiserver.
type Options struct {
	Kubeconfig string // "" means in-cluster
	KubeAPIQPS int    // client-side rate limit towards kube-apiserver
}

// DefaultOptions are in-cluster, at 1000 requests a second.
func DefaultOptions() Options { return Options{KubeAPIQPS: 1000} }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagKubeconfig, Usage: "kubeconfig file; empty means in-cluster", EnvVars: []string{"VGPUD_KUBECONFIG", "KUBECONFIG"}, Destination: &o.Kubeconfig},
		&cli.IntFlag{Name: FlagKubeAPIQPS, Usage: "requests per second this replica may send kube-apiserver (burst twice that); binds need three each", Value: o.KubeAPIQPS, Destination: &o.KubeAPIQPS},
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	if o.KubeAPIQPS < MinAPIQPS || o.KubeAPIQPS > MaxAPIQPS {
		return field.ErrorList{field.Invalid(field.NewPath(FlagKubeAPIQPS), o.KubeAPIQPS, fmt.Sprintf("want %d..%d requests per second", MinAPIQPS, MaxAPIQPS))}
	}
	return nil
}
