package extender

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/pods"
)

// Pod reads ExtenderArgs.Pod as the placer needs it: the leader's own
// record when its informer holds the very same version of the pod (name,
// UID and resourceVersion), else the record of the pod decoded from raw.
// The informer usually has it (kube-scheduler and the leader watch the
// same apiserver), and decoding a whole Pod by reflection (every
// container, quantity and managedFields entry) was a fifth of the
// leader's CPU per pod in make bench's pipeline.
func (p *Placer) Pod(raw []byte) (*pods.Pod, error) {
	var meta struct {
		Metadata struct {
			Name, Namespace, ResourceVersion string
			UID                              types.UID
		}
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	m := meta.Metadata
	if m.UID != "" && m.ResourceVersion != "" {
		if known := p.lookup(m.Namespace, m.Name); known != nil && known.UID == m.UID && known.ResourceVersion == m.ResourceVersion {
			return known, nil
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", m.Namespace, m.Name, err)
	}
	return pods.Of(&pod, p.names), nil
}
