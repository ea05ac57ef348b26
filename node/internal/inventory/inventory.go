// Package inventory turns discovered GPUs into the vgpud.io/gpus node
// annotation and keeps it current, writing only when it changed.
package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/migmaker"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/mig"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// Scaling is what the scheduler is told each GPU offers.
type Scaling struct {
	Split  int
	Memory float64 // > 1 oversubscribes memory
	Cores  float64
}

// OnDemand is what the node makes MIG instances from; the zero value
// makes none.
type OnDemand struct {
	// Catalog is every instance the node may make, by name.
	Catalog map[string]migmaker.Slot
	// Made is the MIG device of each instance made now, by name.
	Made map[string]string
	// Ours says whether a MIG device is one the node made, now or
	// before: listed as its possible instance, never as the operator's.
	Ours func(uuid string) bool
	// Taken are placements of instances the node made that Catalog no
	// longer lists, by GPU: no possible instance overlaps them.
	Taken map[string][]mig.Span
	// OursAt are the placements of every instance the node made, by GPU:
	// the GPU instances there are its own.
	OursAt map[string][]mig.Span
	// Kept are the instances made for a pod that has ended which
	// processes still hold, by name; their placements are in Taken.
	Kept map[string]Kept
}

// Kept is an instance the node made, kept for processes of an ended pod.
type Kept struct {
	migmaker.Slot
	Made string // its MIG device's UUID
	Pod  string // the UID of the pod it was made for
}

// Build is the inventory the scheduler sees: memory and cores after
// scaling, split, and health (healthy unless listed in unhealthy). A GPU
// in MIG mode is listed with its instances instead, unscaled: the
// hardware holds an instance to what it is; and, where the node makes
// instances on demand (od), with those it may make.
func Build(devs []gpu.Device, s Scaling, unhealthy map[string]bool, od OnDemand) protocol.Inventory {
	inv := protocol.Inventory{Version: protocol.Version, Features: protocol.UnderstoodFeatures(), GPUs: make([]protocol.GPU, 0, len(devs))}
	shared := make([]gpu.Device, 0, len(devs))
	for _, d := range devs {
		if d.MIG != nil {
			inv.MIG = append(inv.MIG, migGPU(d, !unhealthy[d.UUID], od))
			continue
		}
		shared = append(shared, d)
		inv.GPUs = append(inv.GPUs, protocol.GPU{
			UUID:      d.UUID,
			Index:     d.Index,
			Model:     d.Model,
			MemoryMiB: int64(float64(d.MemoryMiB) * s.Memory),
			Cores:     int(100 * s.Cores),
			Split:     s.Split,
			NUMA:      d.NUMA,
			Healthy:   !unhealthy[d.UUID],
		})
	}
	inv.Sets = Sets(shared)
	return inv
}

func migGPU(d gpu.Device, healthy bool, od OnDemand) protocol.MIGGPU {
	g := protocol.MIGGPU{UUID: d.UUID, Index: d.Index, Model: d.Model, MemoryMiB: d.MemoryMiB, SMs: d.MIG.SMs, NUMA: d.NUMA, Healthy: healthy,
		Instances: make([]protocol.MIGInstance, 0, len(d.MIG.Instances))}
	var taken []mig.Span
	for _, in := range d.MIG.Instances {
		if od.Ours != nil && od.Ours(in.UUID) {
			continue
		}
		g.Instances = append(g.Instances, protocol.MIGInstance{UUID: in.UUID, Profile: in.Profile, MemoryMiB: in.MemoryMiB, SMs: in.SMs, Start: in.Start, Size: in.Size})
		taken = append(taken, mig.Span{Start: in.Start, Size: in.Size})
	}
	if od.Catalog != nil {
		taken = append(taken, od.Taken[d.UUID]...)
		// A GPU instance listed as no instance (split into compute
		// instances, or without one) takes its placement all the same.
		for _, p := range d.MIG.Taken {
			if !slices.Contains(od.OursAt[d.UUID], p) && !slices.Contains(taken, p) {
				taken = append(taken, p)
			}
		}
		g.Possible = migmaker.Possible(d.UUID, od.Catalog, taken, od.Made)
		for i := range g.Possible {
			g.Possible[i].SMs = min(g.Possible[i].SMs, g.SMs) // the profile's; the GPU's largest bounds it
		}
		for _, id := range slices.Sorted(maps.Keys(od.Kept)) {
			if k := od.Kept[id]; k.Parent == d.UUID {
				g.Kept = append(g.Kept, protocol.MIGInstance{UUID: id, Profile: k.Name, MemoryMiB: k.MemoryMiB, SMs: min(k.SMs, g.SMs),
					Start: k.At.Start, Size: k.At.Size, Made: k.Made, Pod: k.Pod})
			}
		}
	}
	return g
}

// SetIdentity writes the node's vgpud.io/identity annotation.
func (p *Publisher) SetIdentity(ctx context.Context, mode string) error {
	if err := p.annotate(ctx, wellknown.AnnotationIdentity, mode); err != nil {
		return fmt.Errorf("patch node %s annotation %s=%s: %w", p.node, wellknown.AnnotationIdentity, mode, err)
	}
	return nil
}

// SetPluginState writes the node's vgpud.io/plugin annotation.
func (p *Publisher) SetPluginState(ctx context.Context, state string) error {
	if err := p.annotate(ctx, wellknown.AnnotationPlugin, state); err != nil {
		return fmt.Errorf("patch node %s annotation %s=%s: %w", p.node, wellknown.AnnotationPlugin, state, err)
	}
	return nil
}

// SetUsage writes the node's vgpud.io/usage annotation.
func (p *Publisher) SetUsage(ctx context.Context, value string) error {
	if err := p.annotate(ctx, wellknown.AnnotationUsage, value); err != nil {
		return fmt.Errorf("patch node %s annotation %s: %w", p.node, wellknown.AnnotationUsage, err)
	}
	return nil
}

// SetRuntime writes the node's vgpud.io/runtime-check annotation.
func (p *Publisher) SetRuntime(ctx context.Context, value string) error {
	if err := p.annotate(ctx, wellknown.AnnotationRuntime, value); err != nil {
		return fmt.Errorf("patch node %s annotation %s: %w", p.node, wellknown.AnnotationRuntime, err)
	}
	return nil
}

// ClearRuntime removes the node's vgpud.io/runtime-check annotation.
func (p *Publisher) ClearRuntime(ctx context.Context) error {
	patch := []byte(`{"metadata":{"annotations":{"` + wellknown.AnnotationRuntime + `":null}}}`)
	if _, err := p.nodes.Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s: remove annotation %s: %w", p.node, wellknown.AnnotationRuntime, err)
	}
	return nil
}

// ClearUsage removes the node's vgpud.io/usage annotation.
func (p *Publisher) ClearUsage(ctx context.Context) error {
	patch := []byte(`{"metadata":{"annotations":{"` + wellknown.AnnotationUsage + `":null}}}`)
	if _, err := p.nodes.Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s: remove annotation %s: %w", p.node, wellknown.AnnotationUsage, err)
	}
	return nil
}

// annotate sets one annotation on the node with a merge patch.
func (p *Publisher) annotate(ctx context.Context, key, value string) error {
	return p.merge(ctx, "annotations", map[string]string{key: value})
}

// merge sets kv in the node's metadata field (annotations, labels) with
// a merge patch.
func (p *Publisher) merge(ctx context.Context, field string, kv map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{field: kv}})
	if err != nil {
		return err
	}
	_, err = p.nodes.Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Publisher writes the annotation, and the node's labels beside it, on
// one node.
type Publisher struct {
	nodes corev1client.NodesGetter
	node  string
	last  string
	// labels are written with the next Publish where they differ from
	// wrote, what the last write said.
	labels, wrote map[string]string
}

// SetLabels has the next Publish write labels (Labels) too.
func (p *Publisher) SetLabels(labels map[string]string) { p.labels = labels }

// NewPublisher returns a Publisher for node.
func NewPublisher(nodes corev1client.NodesGetter, node string) *Publisher {
	return &Publisher{nodes: nodes, node: node}
}

// Publish patches the annotation unless it already holds inv; it reports
// whether it wrote.
func (p *Publisher) Publish(ctx context.Context, inv protocol.Inventory) (bool, error) {
	raw, err := protocol.EncodeInventory(inv)
	if err != nil {
		return false, fmt.Errorf("encode inventory of node %s: %w", p.node, err)
	}
	wrote := false
	if raw != p.last {
		if err := p.annotate(ctx, wellknown.AnnotationGPUs, raw); err != nil {
			return false, fmt.Errorf("patch node %s annotation %s: %w", p.node, wellknown.AnnotationGPUs, err)
		}
		p.last, wrote = raw, true
	}
	// The labels after, in a patch of their own: a refusal of them
	// must not keep the scheduler from the node's inventory.
	if p.labels != nil && !maps.Equal(p.labels, p.wrote) {
		if err := p.merge(ctx, "labels", p.labels); err != nil {
			return wrote, fmt.Errorf("patch node %s labels %v: %w", p.node, p.labels, err)
		}
		p.wrote, wrote = p.labels, true
	}
	return wrote, nil
}

// Keep writes the inventory annotation, inv at first and each one
// changed sends after, retrying failed writes, until ctx ends.
func (p *Publisher) Keep(ctx context.Context, inv protocol.Inventory, changed <-chan protocol.Inventory, clk clock.Clock, log *slog.Logger) error {
	retry := clk.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case inv = <-changed:
		case <-retry.C():
		}
		wrote, err := p.Publish(ctx, inv)
		if err != nil {
			log.Error("publish GPU inventory; retrying in 5s", "err", err)
			retry.Reset(5 * time.Second)
			continue
		}
		if wrote {
			unhealthy := 0
			for _, g := range inv.GPUs {
				if !g.Healthy {
					unhealthy++
				}
			}
			log.Info("GPU inventory published", "node", p.node, "gpus", len(inv.GPUs), "unhealthy", unhealthy)
		}
	}
}
