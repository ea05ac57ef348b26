package pods

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/vgpud/vgpud/protocol"
)

// PhaseWriter records vgpud.io/phase on pods.
type PhaseWriter struct{ kube kubernetes.Interface }

// NewPhaseWriter returns a writer using kube.
func NewPhaseWriter(kube kubernetes.Interface) PhaseWriter { return PhaseWriter{kube: kube} }

// SetPhase patches the pod's phase annotation. The patch carries the pod's
// UID as a precondition, so a pod deleted and recreated under the same
// name is never marked.
func (w PhaseWriter) SetPhase(ctx context.Context, pod *corev1.Pod, phase protocol.Phase) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{protocol.AnnotationPhase: string(phase)},
	}})
	if err != nil {
		return err
	}
	if _, err := w.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set %s=%q on pod %s/%s: %w", protocol.AnnotationPhase, phase, pod.Namespace, pod.Name, err)
	}
	return nil
}
