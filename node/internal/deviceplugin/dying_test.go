package deviceplugin

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/containerenv"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func deleting(p *corev1.Pod) *corev1.Pod {
	now := metav1.NewTime(time.Now())
	p.DeletionTimestamp = &now
	return p
}

// pinned is a pod placed by nodeName, asking for a GPU, with no assignment.
func pinned(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-pinned-" + name), Annotations: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": *resourceQty(1)},
		}}}},
	}
}

// kubelet admits a pod deleted after it arrived; with no other pod that
// could be the one admitted, Allocate serves it at once rather than
// failing it after ResolveWait.
func TestAllocateServesTheOnlyWaitingPodBeingDeleted(t *testing.T) {
	g := testGPUs(8)
	pod := deleting(boundPod("gone", "n1", nil, [][]string{{g[3].UUID}}, []int64{2000}))
	done := boundPod("done", "n1", nil, [][]string{{g[0].UUID}}, []int64{1000})
	done.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
	pods := newFakePods(pod, done)
	phases := newFakePhases(nil, 0)
	p := testPlugin(t, pods, phases)
	p.opts.ResolveWait = 5 * time.Second

	start := time.Now()
	r, err := allocate(p, ids(g[3].UUID))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Allocate took %v: it waited instead of reading the API", took)
	}
	if got := r.Envs[containerenv.EnvVisibleDevices]; got != g[3].UUID {
		t.Errorf("%s=%q, want %q", containerenv.EnvVisibleDevices, got, g[3].UUID)
	}
	if got := phases.phases("default/gone"); len(got) != 1 || got[0] != protocol.PhaseAllocated {
		t.Errorf("phases written = %v, want [allocated]", got)
	}
	if pods.freshes != 1 {
		t.Errorf("%d fresh reads, want 1", pods.freshes)
	}
}

// A pod pinned by nodeName that the API shows, even one the informer
// does not yet, may be the pod kubelet admits: it must never be handed the
// dying pod's GPUs, so Allocate is refused, naming the pods.
func TestAllocateRefusesADyingPodsGPUsWhileAnotherPodMayBeAdmitted(t *testing.T) {
	g := testGPUs(8)
	for _, informerSees := range []bool{true, false} {
		pod := deleting(boundPod("gone", "n1", nil, [][]string{{g[3].UUID}}, []int64{2000}))
		thief := pinned("thief", "n1")
		pods := newFakePods(pod)
		if informerSees {
			pods.put(thief)
		} else {
			pods.apiOnly = append(pods.apiOnly, thief)
		}
		phases := newFakePhases(nil, 0)
		p := testPlugin(t, pods, phases)
		_, err := allocate(p, ids(g[3].UUID))
		if err == nil {
			t.Fatalf("informer sees the pinned pod %v: Allocate served the dying pod's GPU", informerSees)
		}
		if !strings.Contains(err.Error(), "default/gone (terminating)") {
			t.Errorf("error does not name the pod being deleted: %v", err)
		}
		if got := phases.phases("default/gone"); len(got) != 0 {
			t.Errorf("phases written for the dying pod: %v", got)
		}
	}
}

// A dying pod is served only with its own GPUs, and only when it alone
// is bound and waiting.
func TestAllocateServesNoDyingPodWhenItIsNotTheOnlyOne(t *testing.T) {
	g := testGPUs(8)
	cases := map[string]struct {
		pods []*corev1.Pod
		ids  []string
	}{
		"kubelet's devices are another GPU": {
			pods: []*corev1.Pod{deleting(boundPod("gone", "n1", nil, [][]string{{g[3].UUID}}, []int64{2000}))},
			ids:  ids(g[4].UUID),
		},
		"two dying pods": {
			pods: []*corev1.Pod{
				deleting(boundPod("gone", "n1", nil, [][]string{{g[3].UUID}}, []int64{2000})),
				deleting(boundPod("gone2", "n1", nil, [][]string{{g[4].UUID}}, []int64{2000})),
			},
			ids: ids(g[3].UUID),
		},
		"a dying pod already allocated": {
			pods: []*corev1.Pod{func() *corev1.Pod {
				p := deleting(boundPod("gone", "n1", nil, [][]string{{g[3].UUID}}, []int64{2000}))
				p.Annotations[wellknown.AnnotationPhase] = string(protocol.PhaseAllocated)
				return p
			}()},
			ids: ids(g[3].UUID),
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := testPlugin(t, newFakePods(c.pods...), newFakePhases(nil, 0))
			if r, err := allocate(p, c.ids); err == nil {
				t.Fatalf("Allocate served %s", r.Envs[containerenv.EnvVisibleDevices])
			}
		})
	}
}
