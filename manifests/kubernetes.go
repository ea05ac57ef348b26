package manifests

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The Kubernetes versions vgpud installs on, and the first that serves
// MutatingAdmissionPolicy v1 (beta and off by default before it). The
// chart's kubeVersion and its Capabilities switch say the same.
const (
	OldestKubernetesMinor  = 34
	PolicyKubernetesMinor  = 36
	manifestSchedulerImage = "registry.k8s.io/kube-scheduler:v1.36.3"
)

var kubeVersion = regexp.MustCompile(`^v?1\.([0-9]+)\.([0-9]+)`)

// KubernetesVersion parses a cluster's version as its apiserver reports
// it (v1.34.4, v1.34.4+k3s1, v1.34.4-eks-1552ad0) into its release tag,
// v1.34.4, and minor, 34.
func KubernetesVersion(v string) (tag string, minor int, err error) {
	m := kubeVersion.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return "", 0, fmt.Errorf("kubernetes version %q: want the apiserver's version, v1.MINOR.PATCH (kubectl version)", v)
	}
	minor, _ = strconv.Atoi(m[1])
	if minor < OldestKubernetesMinor {
		return "", 0, fmt.Errorf("kubernetes version %q: vgpud needs Kubernetes 1.%d or newer", v, OldestKubernetesMinor)
	}
	return "v1." + m[1] + "." + m[2], minor, nil
}

// ForKubernetes returns the install manifest for a cluster of version v,
// as the chart renders it there: below 1.36 without its
// MutatingAdmissionPolicies and their bindings (the webhook then admits
// GPU pods alone, and marks those that could reach a GPU), and with the
// kube-scheduler of the cluster's own version.
func ForKubernetes(manifest, v string) (string, error) {
	tag, minor, err := KubernetesVersion(v)
	if err != nil {
		return "", err
	}
	if strings.Count(manifest, "image: "+manifestSchedulerImage+"\n") != 1 {
		return "", fmt.Errorf("the manifest names no %s once: want manifests/vgpud.yaml or an overlay of it", manifestSchedulerImage)
	}
	manifest = strings.Replace(manifest, "image: "+manifestSchedulerImage+"\n", "image: registry.k8s.io/kube-scheduler:"+tag+"\n", 1)
	if minor >= PolicyKubernetesMinor {
		return manifest, nil
	}
	docs := strings.Split(manifest, "\n---\n")
	kept := docs[:0]
	for _, doc := range docs {
		if strings.Contains(doc, "\nkind: MutatingAdmissionPolicy\n") || strings.Contains(doc, "\nkind: MutatingAdmissionPolicyBinding\n") {
			continue
		}
		kept = append(kept, doc)
	}
	if len(kept) == len(docs) {
		return "", fmt.Errorf("the manifest has no MutatingAdmissionPolicy to leave out for Kubernetes %s", tag)
	}
	return strings.Join(kept, "\n---\n"), nil
}
