// Package nslabels is `vgpud namespace-labels`: the chart's install hook
// that puts on vgpud's namespace the labels its manifest's Namespace
// carries (Pod Security privileged, vgpud's webhook skipped), where Helm
// made the namespace itself (--create-namespace) and could not.
package nslabels

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Parse reads "KEY=VALUE" labels, each key a label key and each value a
// label value.
func Parse(labels []string) (map[string]string, error) {
	out := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want KEY=VALUE", l)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("label %q: %s", l, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("label %q: %s", l, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no label given: want --label KEY=VALUE")
	}
	return out, nil
}

// Apply merges labels into namespace ns, leaving its other labels as
// they are, and says what it set on stdout.
func Apply(ctx context.Context, core typedcorev1.NamespacesGetter, ns string, labels map[string]string, stdout io.Writer) error {
	if ns == "" {
		return fmt.Errorf("no namespace: set POD_NAMESPACE (the downward API's metadata.namespace)")
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	got, err := core.Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "vgpud-namespace-labels"})
	if err != nil {
		return fmt.Errorf("label namespace %s: %w", ns, err)
	}
	for k := range labels {
		if got.Labels[k] != labels[k] {
			return fmt.Errorf("namespace %s: label %s is %q after the patch, want %q", ns, k, got.Labels[k], labels[k])
		}
	}
	fmt.Fprintf(stdout, "namespace %s labelled %v\n", ns, labels)
	return nil
}
