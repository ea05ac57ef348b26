package extender

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
)

// podMeta is what Pod reads of ExtenderArgs.Pod before deciding whether
// to decode the rest.
type podMeta struct {
	Metadata struct {
		Name            string    `json:"name"`
		Namespace       string    `json:"namespace"`
		UID             types.UID `json:"uid"`
		ResourceVersion string    `json:"resourceVersion"`
	} `json:"metadata"`
}

// Pod reads ExtenderArgs.Pod as the placer needs it: the leader's own
// record when its informer holds the very same version of the pod
// (namespace, name, UID and resourceVersion), else the record of the pod
// decoded from raw. The informer usually has it (kube-scheduler and the
// leader watch the same apiserver), and decoding a whole Pod by
// reflection (every container, quantity and managedFields entry) was a
// fifth of the leader's CPU per pod in make bench's pipeline. On a hit
// the rest of raw is not read: the record is the apiserver's copy of that
// version, which the body can only repeat.
func (p *Placer) Pod(raw []byte) (*slimpod.Pod, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("the pod is not a JSON object")
	}
	var meta podMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("pod metadata: %w", err)
	}
	m := meta.Metadata
	if m.UID != "" && m.ResourceVersion != "" {
		if known := p.lookup(m.Namespace, m.Name); known != nil && known.UID == m.UID && known.ResourceVersion == m.ResourceVersion {
			p.read(true)
			return known, nil
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", m.Namespace, m.Name, err)
	}
	p.read(false)
	return slimpod.Of(&pod, p.names), nil
}

func (p *Placer) read(fromInformer bool) {
	if p.podRead != nil {
		p.podRead(fromInformer)
	}
}
