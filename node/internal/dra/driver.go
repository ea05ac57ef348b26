// Package dra is the node's DRA driver, where the node serves claims
// (--dra): it registers with kubelet, publishes the node's devices
// (protocol/dradevices) as ResourceSlices, prepares each claim kubelet
// asks for into CDI devices and a record on the node, and answers the
// runtime hook from that record.
package dra

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/dradevices"
)

// sliceDevices bounds a ResourceSlice's devices: the API allows 64 where
// any device has taints, which an unhealthy GPU's has.
const sliceDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Resources are devs as the node's one pool, named after the node, in
// slices of at most sliceDevices, in order.
func Resources(node string, devs []resourceapi.Device) resourceslice.DriverResources {
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{}}
	for start := 0; start < len(devs); start += sliceDevices {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs[start:min(start+sliceDevices, len(devs))]})
	}
	if len(pool.Slices) == 0 {
		// An empty slice says the driver runs and has no devices; no
		// slice would say nothing.
		pool.Slices = append(pool.Slices, resourceslice.Slice{})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: pool}}
}

// ClaimDriver is the node's DRA driver: registered with kubelet, preparing
// claims through the Preparer, and publishing the node's devices as
// ResourceSlices owned by its Node (so that they go with it).
type ClaimDriver struct {
	node     string
	defaults dradevices.ClaimDefaults
	prep     *Preparer
	helper   *kubeletplugin.Helper
}

// KubeletDirs are where kubelet meets the driver: its plugin directory
// (the gRPC socket) and its registry (the registration socket). Both
// paths must be the same inside vgpud's container and on the host.
type KubeletDirs struct {
	Plugin, Registry string
}

// StartClaimDriver registers with kubelet and serves its calls until ctx
// ends or Stop; it offers nothing until Publish.
func StartClaimDriver(ctx context.Context, kube kubernetes.Interface, node string, dirs KubeletDirs, defaults dradevices.ClaimDefaults, prep *Preparer) (*ClaimDriver, error) {
	prep.getClaim = func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
		return kube.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	h, err := kubeletplugin.Start(ctx, prep,
		kubeletplugin.DriverName(dradevices.DriverName), kubeletplugin.KubeClient(kube), kubeletplugin.NodeName(node),
		kubeletplugin.PluginDataDirectoryPath(dirs.Plugin), kubeletplugin.RegistrarDirectoryPath(dirs.Registry))
	if err != nil {
		return nil, fmt.Errorf("start the DRA driver %s: %w", dradevices.DriverName, err)
	}
	return &ClaimDriver{node: node, defaults: defaults, prep: prep, helper: h}, nil
}

// Resolve is the grant behind a CDI device kubelet gave container of
// pod podUID (Preparer.Resolve).
func (d *ClaimDriver) Resolve(ctx context.Context, cdiName, podUID, container string) (Grant, bool, error) {
	return d.prep.Resolve(ctx, cdiName, podUID, container)
}

// Claims are what the node prepared, by claim UID.
func (d *ClaimDriver) Claims() map[string]Prepared { return d.prep.Claims() }

// Publish offers inv's devices: to the Preparer first, so that a claim
// allocated on a new device is prepared, then as ResourceSlices, the
// GPUs m marks tainted.
func (d *ClaimDriver) Publish(ctx context.Context, inv protocol.Inventory, m dradevices.Marks) error {
	d.prep.Offer(inv, m)
	if err := d.helper.PublishResources(ctx, Resources(d.node, dradevices.Devices(inv, d.defaults, m))); err != nil {
		return fmt.Errorf("publish %s's ResourceSlices: %w", d.node, err)
	}
	return nil
}

// Registered says whether kubelet has registered the driver, and why
// not where it has not.
func (d *ClaimDriver) Registered() (bool, error) {
	st := d.helper.RegistrationStatus()
	if st == nil {
		return false, errors.New("kubelet has not called the registration socket yet")
	}
	if !st.PluginRegistered {
		return false, fmt.Errorf("kubelet refused the registration: %s", st.Error)
	}
	return true, nil
}

// Stop unregisters and stops publishing; the slices stay until the Node
// goes or a later start replaces them.
func (d *ClaimDriver) Stop() { d.helper.Stop() }
