package node

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vgpud/vgpud/node/gpu"
	"github.com/vgpud/vgpud/setting"
)

// Validate reports every node-role setting that cannot work, naming its
// flag. Per-node overrides are read and checked when the role starts
// (ForNode), on the node they name.
func (c Config) Validate() error {
	var errs []error
	if err := gpu.ValidateBackend(c.GPUBackend); err != nil {
		errs = append(errs, setting.Invalid("gpu-backend", c.GPUBackend, err.Error()))
	}
	if p := SplitProblem(c.Split); p != "" {
		errs = append(errs, setting.Invalid("split", c.Split, p))
	}
	if p := ScalingProblem(c.MemoryScaling); p != "" {
		errs = append(errs, setting.Invalid("memory-scaling", c.MemoryScaling, p))
	}
	if p := ScalingProblem(c.CoreScaling); p != "" {
		errs = append(errs, setting.Invalid("core-scaling", c.CoreScaling, p))
	}
	if c.DevicePluginSocket == "" || strings.ContainsRune(c.DevicePluginSocket, '/') || c.DevicePluginSocket == "kubelet.sock" {
		errs = append(errs, setting.Invalid("device-plugin-socket", c.DevicePluginSocket, "want a plain file name other than kubelet.sock, such as vgpud.sock"))
	}
	if c.HealthRecovery < MinHealthRecovery {
		errs = append(errs, setting.Invalid("health-recovery", c.HealthRecovery, "want at least "+MinHealthRecovery.String()))
	}
	if c.AllocateWait <= 0 || c.AllocateWait > MaxAllocateWait {
		errs = append(errs, setting.Invalid("allocate-wait", c.AllocateWait, "want above 0 and at most "+MaxAllocateWait.String()+" (kubelet's Allocate times out)"))
	}
	if c.InterposerDir != "" && !filepath.IsAbs(c.InterposerDir) {
		errs = append(errs, setting.Invalid("interposer-dir", c.InterposerDir, "want an absolute host path, such as /usr/local/vgpu"))
	}
	if c.PodResourcesPeriod < time.Second {
		errs = append(errs, setting.Invalid("pod-resources-period", c.PodResourcesPeriod, "want at least 1s"))
	}
	if c.DevicePluginDir == "" {
		errs = append(errs, setting.Invalid("device-plugin-dir", "", "want kubelet's device-plugin directory, usually /var/lib/kubelet/device-plugins"))
	}
	if c.InspectSocket == "" {
		errs = append(errs, setting.Invalid("inspect-socket", "", fmt.Sprintf("want a socket path such as %s", DefaultConfig().InspectSocket)))
	}
	if c.NRISocket != "" && !filepath.IsAbs(c.NRISocket) {
		errs = append(errs, setting.Invalid("nri-socket", c.NRISocket, "want an absolute path such as /var/run/nri/nri.sock, or empty to guess which pod kubelet admits"))
	}
	for _, ns := range c.NRIExemptNamespaces {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			errs = append(errs, setting.Invalid("nri-exempt-namespaces", strings.Join(c.NRIExemptNamespaces, ","), fmt.Sprintf("%q is not a namespace name", ns)))
			break
		}
	}
	return errors.Join(errs...)
}
