package node

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/preflight"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol"
)

// Validate reports every node-role setting that cannot work, by its flag.
// Per-node overrides are read and checked with it when the role starts
// (ForNode), on the node they select.
func (c Config) Validate() field.ErrorList {
	var errs field.ErrorList
	if err := gpu.ValidateBackend(c.GPUBackend); err != nil {
		errs = append(errs, invalid(flagGPUBackend, c.GPUBackend, err.Error()))
	}
	if p := SplitProblem(c.Split); p != "" {
		errs = append(errs, invalid(flagSplit, c.Split, p))
	}
	if p := ScalingProblem(c.MemoryScaling); p != "" {
		errs = append(errs, invalid(flagMemoryScaling, c.MemoryScaling, p))
	}
	if p := ScalingProblem(c.CoreScaling); p != "" {
		errs = append(errs, invalid(flagCoreScaling, c.CoreScaling, p))
	}
	if c.DevicePluginSocket == "" || strings.ContainsRune(c.DevicePluginSocket, '/') || c.DevicePluginSocket == "kubelet.sock" {
		errs = append(errs, invalid(flagDevicePluginSocket, c.DevicePluginSocket, "want a plain file name other than kubelet.sock, such as vgpud.sock"))
	}
	if c.RescanInterval != 0 && c.RescanInterval < time.Second {
		errs = append(errs, invalid(flagRescanInterval, c.RescanInterval, "want 0 (never) or at least 1s"))
	}
	if c.HealthRecovery < MinHealthRecovery {
		errs = append(errs, invalid(flagHealthRecovery, c.HealthRecovery, "want at least "+MinHealthRecovery.String()))
	}
	if c.AllocateWait <= 0 || c.AllocateWait > MaxAllocateWait {
		errs = append(errs, invalid(flagAllocateWait, c.AllocateWait, "want above 0 and at most "+MaxAllocateWait.String()+" (kubelet's Allocate times out)"))
	}
	if c.InterposerDir != "" && !filepath.IsAbs(c.InterposerDir) {
		errs = append(errs, invalid(flagInterposerDir, c.InterposerDir, "want an absolute host path, such as /usr/local/vgpu"))
	}
	if c.PodResourcesPeriod < time.Second {
		errs = append(errs, invalid(flagPodResourcesPeriod, c.PodResourcesPeriod, "want at least 1s"))
	}
	if c.DevicePluginDir == "" {
		errs = append(errs, invalid(flagDevicePluginDir, "", "want kubelet's device-plugin directory, usually /var/lib/kubelet/device-plugins"))
	}
	if c.InspectSocket == "" {
		errs = append(errs, invalid(flagInspectSocket, "", fmt.Sprintf("want a socket path such as %s", DefaultConfig().InspectSocket)))
	}
	if _, err := preflight.ParseSpec(c.RuntimeConfig); err != nil {
		errs = append(errs, invalid(flagRuntimeConfig, c.RuntimeConfig, err.Error()+", or empty to read none"))
	}
	if c.NRISocket != "" && !filepath.IsAbs(c.NRISocket) {
		errs = append(errs, invalid(flagNRISocket, c.NRISocket, "want an absolute path such as /var/run/nri/nri.sock, or empty to guess which pod kubelet admits"))
	}
	for flag, list := range map[string][]string{flagNRIExemptNamespaces: c.NRIExemptNamespaces, flagNRIEarlyNamespaces: c.NRIEarlyNamespaces} {
		for _, ns := range list {
			if len(validation.IsDNS1123Label(ns)) > 0 {
				errs = append(errs, invalid(flag, strings.Join(list, ","), fmt.Sprintf("%q is not a namespace name", ns)))
				break
			}
		}
	}
	if _, err := usage.ParseMode(c.GPUUsage); err != nil {
		errs = append(errs, invalid(flagGPUUsage, c.GPUUsage, "want one of "+strings.Join(usage.Modes, ", ")))
	}
	if c.GPUUsagePeriod < MinGPUUsagePeriod || c.GPUUsagePeriod > MaxGPUUsagePeriod {
		errs = append(errs, invalid(flagGPUUsagePeriod, c.GPUUsagePeriod, fmt.Sprintf("want from %s to %s", MinGPUUsagePeriod, MaxGPUUsagePeriod)))
	}
	if c.GPUUsageMargin < 0 || c.GPUUsageMargin > MaxGPUUsageMarginMiB {
		errs = append(errs, invalid(flagGPUUsageMargin, c.GPUUsageMargin, fmt.Sprintf("want MiB from 0 to %d", MaxGPUUsageMarginMiB)))
	}
	if c.GPUUsageReserve < 0 || c.GPUUsageReserve > protocol.MaxMemoryMiB {
		errs = append(errs, invalid(flagGPUUsageReserve, c.GPUUsageReserve, fmt.Sprintf("want MiB from 0 to %d", protocol.MaxMemoryMiB)))
	}
	if c.GPUUsageRecord != "" && !filepath.IsAbs(c.GPUUsageRecord) {
		errs = append(errs, invalid(flagGPUUsageRecord, c.GPUUsageRecord, "want an absolute path on a host path, such as /var/lib/vgpud/gpu-usage-{node}.json, or empty to keep it in memory only"))
	}
	for _, p := range c.MIGOnDemandProfiles {
		if !protocol.ValidMIGProfile(p) {
			errs = append(errs, invalid(flagMIGOnDemandProfiles, strings.Join(c.MIGOnDemandProfiles, ","), fmt.Sprintf("%q is no MIG profile; want names like 1g.10gb or 3g.40gb", p)))
			break
		}
	}
	if len(c.MIGOnDemand) > 0 && c.MIGRecord == "" {
		errs = append(errs, invalid(flagMIGRecord, c.MIGRecord, "empty; instances made on demand need a record, on a host path"))
	}
	for _, e := range c.ExcludeGPUs {
		if e == "" {
			errs = append(errs, invalid(flagExcludeGPUs, strings.Join(c.ExcludeGPUs, ","), "an empty entry; want GPU indexes or UUIDs"))
			break
		}
	}
	return errs
}

// invalid says that --flag=value cannot work and what would.
func invalid(flag string, value any, want string) *field.Error {
	return field.Invalid(field.NewPath(flag), value, want)
}
