// Package schedulerskew warns when the kube-scheduler the install pins
// falls behind the apiserver.
package schedulerskew

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
)

// The kube-scheduler that runs vgpud's profile is an image the install
// pins (the chart's scheduler.image), not the cluster's own: an upgraded
// control plane leaves it behind. Kubernetes supports a kube-scheduler
// as new as the apiserver and one minor release older.

// Skew says what is wrong with running image beside an apiserver
// of server's version: "" when its minor version is the apiserver's.
func Skew(image string, server *apimachineryversion.Info) string {
	apiserver, err := utilversion.ParseGeneric(server.GitVersion)
	if err != nil {
		return fmt.Sprintf("cannot read the apiserver's version %q: %v", server.GitVersion, err)
	}
	ref, _, _ := strings.Cut(image, "@")
	tag := ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag = ref[i+1:]
	}
	sched, err := utilversion.ParseGeneric(tag)
	if err != nil {
		return fmt.Sprintf("kube-scheduler image %s has no version tag to compare with the apiserver's %s: make sure its minor version is %d.%d",
			image, server.GitVersion, apiserver.Major(), apiserver.Minor())
	}
	same := fmt.Sprintf("set the kube-scheduler image (the chart's scheduler.image) to registry.k8s.io/kube-scheduler:v%d.%d.x", apiserver.Major(), apiserver.Minor())
	switch {
	case sched.Major() == apiserver.Major() && sched.Minor() == apiserver.Minor():
		return ""
	case sched.Major() == apiserver.Major() && sched.Minor()+1 == apiserver.Minor():
		return fmt.Sprintf("kube-scheduler %s is one minor release older than the apiserver's %s, within Kubernetes' supported skew but untested with vgpud: %s",
			tag, server.GitVersion, same)
	default:
		return fmt.Sprintf("kube-scheduler %s beside an apiserver at %s is outside Kubernetes' supported skew (as new as the apiserver, or one minor release older): %s",
			tag, server.GitVersion, same)
	}
}

// Check reads the scheduler Deployment's image and the
// apiserver's version and logs a warning on skew. It decides nothing:
// vgpud runs on either way.
func Check(ctx context.Context, deployments appsv1client.DeploymentsGetter, namespace, name string,
	serverVersion func() (*apimachineryversion.Info, error), log *slog.Logger) {
	if serverVersion == nil || name == "" {
		return
	}
	server, err := serverVersion()
	if err != nil {
		log.Warn("cannot read the apiserver's version to check the kube-scheduler's", "err", err)
		return
	}
	d, err := deployments.Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		log.Warn("cannot read the scheduler Deployment to check its kube-scheduler's version", "deployment", namespace+"/"+name, "err", err)
		return
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "kube-scheduler" {
			continue
		}
		if msg := Skew(c.Image, server); msg != "" {
			log.Warn(msg, "deployment", namespace+"/"+name, "image", c.Image, "apiserver", server.GitVersion)
			return
		}
		log.Info("kube-scheduler's version is the apiserver's", "image", c.Image, "apiserver", server.GitVersion)
	}
}
