package nodepods

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// PhaseWriter records vgpud.io/phase on pods.
type PhaseWriter struct{ pods corev1client.PodsGetter }

// NewPhaseWriter returns a writer using pods.
func NewPhaseWriter(pods corev1client.PodsGetter) PhaseWriter { return PhaseWriter{pods: pods} }

// SetPhase patches the pod's phase annotation. The patch carries the pod's
// UID as a precondition, so a pod deleted and recreated under the same
// name is never marked.
func (w PhaseWriter) SetPhase(ctx context.Context, pod *corev1.Pod, phase protocol.Phase) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{wellknown.AnnotationPhase: string(phase)},
	}})
	if err != nil {
		return err
	}
	if _, err := w.pods.Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set %s=%q on pod %s/%s: %w", wellknown.AnnotationPhase, phase, pod.Namespace, pod.Name, err)
	}
	return nil
}
