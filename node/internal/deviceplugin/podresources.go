package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/kubeletapi"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Mismatch is a pod whose devices, as kubelet's PodResources API reports
// them, are not slices of the GPUs vgpud assigned it.
type Mismatch struct {
	Pod     *corev1.Pod
	Message string
}

// CheckPodResources compares kubelet's truth with the assignments of the
// allocated pods on node: every device ID a container holds must be a
// slice of a GPU assigned to its pod (kubelet may hand an app container
// what an init container released, as Allocate accepts too).
// It also returns how many pods it compared.
func CheckPodResources(node string, pods []*corev1.Pod, devices []kubeletapi.PodDevices) (int, []Mismatch) {
	byName := make(map[string]kubeletapi.PodDevices, len(devices))
	for _, d := range devices {
		byName[d.Namespace+"/"+d.Name] = d
	}
	var out []Mismatch
	checked := 0
	for _, p := range pods {
		if p.Spec.NodeName != node || podmodel.Terminated(p) || p.Annotations[wellknown.AnnotationPhase] != string(protocol.PhaseAllocated) {
			continue
		}
		a, err := protocol.DecodeAssignment(p.Annotations[wellknown.AnnotationAssignment])
		if err != nil || a.Node != node {
			continue
		}
		d, ok := byName[p.Namespace+"/"+p.Name]
		if !ok {
			continue // kubelet has not reported it yet, or it holds nothing
		}
		checked++
		names := make([]string, 0, len(d.Containers))
		for name := range d.Containers {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if ids := d.Containers[name]; !podOwns(a, ids) {
				out = append(out, Mismatch{Pod: p, Message: fmt.Sprintf("kubelet reports container %q holding devices %s, which are not slices of the GPUs vgpud assigned this pod (%s)",
					name, strings.Join(ids, ", "), strings.Join(assignedGPUs(a), ", "))})
			}
		}
	}
	return checked, out
}

func assignedGPUs(a protocol.Assignment) []string {
	var out []string
	for _, c := range a.Containers {
		for _, g := range c.GPUs {
			if !slices.Contains(out, g.UUID) {
				out = append(out, g.UUID)
			}
		}
	}
	return out
}

// PodResourcesCheck runs CheckPodResources against kubelet every period.
type PodResourcesCheck struct {
	Node     string
	Socket   string // kubelet's pod-resources socket
	Resource string
	Pods     PodSource
	Period   time.Duration
	// Report is told of each mismatch (an Event and a metric); a pod is
	// reported once.
	Report func(m Mismatch)
	Clock  clock.WithTicker // times Period
	Log    *slog.Logger
}

// Run checks until ctx ends. A kubelet that cannot be asked is logged,
// not fatal: the check is a cross-check, not a gate.
func (c PodResourcesCheck) Run(ctx context.Context) error {
	reported := map[string]bool{}
	lastChecked := -1
	tick := c.Clock.NewTicker(c.Period)
	defer tick.Stop()
	for {
		devs, err := kubeletapi.ListPodDevices(ctx, c.Socket, c.Resource)
		if err != nil {
			c.Log.Warn("cross-check with kubelet's PodResources skipped", "err", err)
		}
		checked, mismatches := CheckPodResources(c.Node, c.Pods.List(), devs)
		if err == nil && checked != lastChecked {
			lastChecked = checked
			c.Log.Info("cross-checked allocated pods with kubelet's PodResources", "pods", checked, "disagreeing", len(mismatches))
		}
		for _, m := range mismatches {
			if key := string(m.Pod.UID) + m.Message; !reported[key] {
				reported[key] = true
				c.Log.Error("kubelet's devices disagree with the assignment", "pod", m.Pod.Namespace+"/"+m.Pod.Name, "detail", m.Message)
				c.Report(m)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}
