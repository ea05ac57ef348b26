package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// sliceDevices bounds a ResourceSlice's devices: the API allows 64 where
// any device has taints, which an unhealthy GPU's has.
const sliceDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Resources are devs as the node's one pool, named after the node, in
// slices of at most sliceDevices, in order.
func Resources(node string, devs []resourceapi.Device) *resourceslice.DriverResources {
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{}}
	for start := 0; start < len(devs); start += sliceDevices {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs[start:min(start+sliceDevices, len(devs))]})
	}
	if len(pool.Slices) == 0 {
		// An empty slice says the driver runs and has no devices; no
		// slice would say nothing.
		pool.Slices = append(pool.Slices, resourceslice.Slice{})
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: pool}}
}

// SlicePublisher keeps the node's ResourceSlices: owned by its Node, so that
// they go with it, and written only by the node's own replica.
type SlicePublisher struct {
	node string
	c    *resourceslice.Controller
}

// StartSlicePublisher publishes node's devices until ctx ends; it starts
// with an empty pool until Publish says what the node has.
func StartSlicePublisher(ctx context.Context, kube kubernetes.Interface, node string, log *slog.Logger) (*SlicePublisher, error) {
	c, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: DriverName,
		KubeClient: kube,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
		Resources:  Resources(node, nil),
		ErrorHandler: func(_ context.Context, err error, msg string) {
			var dropped *resourceslice.DroppedFieldsError
			if errors.As(err, &dropped) {
				log.Error("the apiserver dropped fields of vgpud's ResourceSlices: turn these feature gates on, or GPUs are offered without what they need", "features", dropped.DisabledFeatures(), "err", err)
				return
			}
			log.Error("publish ResourceSlices; retrying", "step", msg, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start publishing %s's ResourceSlices: %w", node, err)
	}
	return &SlicePublisher{node: node, c: c}, nil
}

// Publish replaces what the node offers with devs.
func (p *SlicePublisher) Publish(devs []resourceapi.Device) { p.c.Update(Resources(p.node, devs)) }

// Stop stops publishing; the slices stay until the Node goes or a later
// start replaces them.
func (p *SlicePublisher) Stop() { p.c.Stop() }
