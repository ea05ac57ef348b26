package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/inspect"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/inspectv1"
)

// TestNodeRoleOnNVML runs the node role on the real driver (--gpu-backend
// nvml) against a fake clientset and a fake kubelet, and checks what it
// found and handed out against nvidia-smi. It needs an NVIDIA GPU and
// driver, so it runs only when VGPUD_TEST_NVML=1 asks for it. With
// VGPUD_TEST_NVML_FAULT set to a command that makes a kernel on GPU 0
// fault (scripts/nvml/fault.py), it also checks that the driver's XID
// reaches the health watcher, which ignores it as an application fault.
func TestNodeRoleOnNVML(t *testing.T) {
	want := nvidiaSMI(t)
	r := startNVMLRole(t, func(*Config) {})
	devs := r.list(t)
	if len(devs) != r.cfg.Sharing.Split*len(want) {
		t.Fatalf("%d devices advertised, want %d (split %d × %d GPUs)", len(devs), r.cfg.Sharing.Split*len(want), r.cfg.Sharing.Split, len(want))
	}
	inv := r.inventory(t, func(inv protocol.Inventory) bool { return len(inv.GPUs) == len(want) })
	for i, g := range inv.GPUs {
		w := want[i]
		if g.UUID != w.uuid || g.Model != w.name || g.MemoryMiB != w.memoryMiB || !g.Healthy {
			t.Errorf("GPU %d: inventory %+v, nvidia-smi says %+v", i, g, w)
		}
		if n := gpu.SysfsNUMA(w.busID); g.NUMA != n {
			t.Errorf("GPU %d: NUMA %d, sysfs says %d", i, g.NUMA, n)
		}
	}
	r.waitLog(t, fmt.Sprintf(`msg="watching GPU health through XID events" component=health gpus=%d of=%d`, len(want), len(want)))

	// A pod bound to a quarter of GPU 0: kubelet admits it.
	ctx := context.Background()
	uuid, mem := inv.GPUs[0].UUID, inv.GPUs[0].MemoryMiB/4
	resp := r.allocate(t, uuid, mem, 25)
	if resp.Envs["NVIDIA_VISIBLE_DEVICES"] != uuid || resp.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != strconv.FormatInt(mem, 10)+"m" || resp.Envs["CUDA_DEVICE_SM_LIMIT"] != "25" {
		t.Errorf("Allocate's env %v", resp.Envs)
	}
	t.Logf("Allocate's env for %s-0: %v", uuid, resp.Envs)

	s := waitSnapshot(t, r.cfg.Inspect.InspectSocket, func(s inspectv1.NodeSnapshot) bool { return len(s.Allocations) == 1 })
	if !s.Ready || s.Backend != "nvml" || s.GPUs[0].MemoryUsedMiB != mem || s.GPUs[0].SlicesUsed != 1 {
		t.Errorf("snapshot %+v", s)
	}
	var view bytes.Buffer
	if err := inspect.Render(&view, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("vgpud inspect:\n%s", view.String())
	// XIDs can be injected only into mocks; the driver's GPUs refuse.
	if err := inspect.InjectXID(ctx, r.cfg.Inspect.InspectSocket, "0", 79); err == nil {
		t.Error("an XID was injected into a real GPU")
	}

	if fault(t, uuid) {
		r.waitLog(t, `msg="ignored XID"`)
		if inv := r.inventory(t, func(protocol.Inventory) bool { return true }); !inv.GPUs[0].Healthy {
			t.Error("an application fault made GPU 0 unhealthy")
		}
		select {
		case devs := <-r.lists:
			t.Errorf("kubelet was sent %d devices after an ignored XID", len(devs))
		case <-time.After(time.Second):
		}
	} else {
		t.Log("VGPUD_TEST_NVML_FAULT is not set: no XID made")
	}
	if strings.Contains(r.logs.String(), "level=ERROR") {
		t.Error("the node role logged an error")
	}
}

// TestNVMLFaultHealth runs the node role on the real driver with no XID
// ignored, makes a kernel on GPU 0 fault (VGPUD_TEST_NVML_FAULT), and
// checks the GPU leaves kubelet's device list and the inventory, then
// comes back after the quiet period once NVML answers for it.
func TestNVMLFaultHealth(t *testing.T) {
	want := nvidiaSMI(t)
	if os.Getenv("VGPUD_TEST_NVML_FAULT") == "" {
		t.Skip("set VGPUD_TEST_NVML_FAULT to a command that makes a kernel on GPU 0 fault (scripts/nvml/fault.py)")
	}
	r := startNVMLRole(t, func(c *Config) { c.Health.HealthIgnoreXIDs, c.Health.HealthRecovery = []uint64{}, 3*time.Second })
	if devs := r.list(t); len(devs) != r.cfg.Sharing.Split*len(want) {
		t.Fatalf("%d devices advertised, want %d", len(devs), r.cfg.Sharing.Split*len(want))
	}
	inv := r.inventory(t, func(inv protocol.Inventory) bool { return len(inv.GPUs) == len(want) && inv.GPUs[0].Healthy })
	faulted := time.Now()
	fault(t, inv.GPUs[0].UUID)
	r.inventory(t, func(inv protocol.Inventory) bool { return !inv.GPUs[0].Healthy })
	t.Logf("GPU 0 unhealthy in the inventory %v after the fault began", time.Since(faulted))
	if devs := r.list(t); len(devs) != r.cfg.Sharing.Split*(len(want)-1) {
		t.Errorf("%d devices advertised with GPU 0 unhealthy, want %d", len(devs), r.cfg.Sharing.Split*(len(want)-1))
	}
	r.inventory(t, func(inv protocol.Inventory) bool { return inv.GPUs[0].Healthy })
	t.Logf("GPU 0 healthy again %v after the fault began (quiet period 3s)", time.Since(faulted))
	if devs := r.list(t); len(devs) != r.cfg.Sharing.Split*len(want) {
		t.Errorf("%d devices advertised after recovery, want %d", len(devs), r.cfg.Sharing.Split*len(want))
	}
	r.waitLog(t, `msg="critical XID: GPU unhealthy"`)
	r.waitLog(t, `msg="GPUs recovered after a quiet period"`)
}

// TestNVMLInterposerHoldsTheSlice hands HAMi-core's libvgpu.so out with
// a quarter of GPU 0 and runs a CUDA program as the container would see
// it: Allocate's env, the preloaded library, the GPU the runtime exposes.
// The program must see the slice's memory as the GPU's total and fail to
// allocate beyond it. VGPUD_TEST_NVML_INTERPOSER is a directory holding
// libvgpu.so; VGPUD_TEST_NVML_PROBE a command that takes the limit in MiB
// and prints scripts/nvml/probe.py's JSON.
func TestNVMLInterposerHoldsTheSlice(t *testing.T) {
	nvidiaSMI(t)
	dir, probe := os.Getenv("VGPUD_TEST_NVML_INTERPOSER"), os.Getenv("VGPUD_TEST_NVML_PROBE")
	if dir == "" || probe == "" {
		t.Skip("set VGPUD_TEST_NVML_INTERPOSER to a directory holding HAMi-core's libvgpu.so and VGPUD_TEST_NVML_PROBE to scripts/nvml/probe.py's command")
	}
	r := startNVMLRole(t, func(c *Config) { c.Slices.InterposerDir = dir })
	r.list(t)
	inv := r.inventory(t, func(inv protocol.Inventory) bool { return len(inv.GPUs) > 0 })
	mem := inv.GPUs[0].MemoryMiB / 4
	resp := r.allocate(t, inv.GPUs[0].UUID, mem, 25)
	cmd := exec.Command("sh", "-c", probe+" "+strconv.FormatInt(mem, 10))
	cmd.Env = append(os.Environ(), asContainer(t, resp)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("probe: %s\n%s", out, stderr.String())
	if err != nil {
		t.Fatalf("%s: %v", probe, err)
	}
	var got struct {
		TotalMiB int64 `json:"totalMiB"`
		Under    *bool `json:"under"`
		Over     *bool `json:"over"`
	}
	last := bytes.TrimSpace(out)
	last = last[bytes.LastIndexByte(last, '\n')+1:]
	if err := json.Unmarshal(last, &got); err != nil || got.Under == nil || got.Over == nil {
		t.Fatalf("probe's last line %q: want totalMiB, under and over (%v)", last, err)
	}
	if got.TotalMiB != mem || !*got.Under || *got.Over {
		t.Errorf("under the interposer the program saw %d MiB total (want %d), allocated 1 GiB under the limit: %v (want true), 1 GiB over: %v (want false)", got.TotalMiB, mem, *got.Under, *got.Over)
	}
}

// asContainer is the environment of a process standing in for the
// container of resp: its env with container paths mapped to the mounts'
// host paths, the library the mounted ld.so.preload names as LD_PRELOAD,
// and only the GPUs the NVIDIA runtime would expose.
func asContainer(t *testing.T, resp *pluginapi.ContainerAllocateResponse) []string {
	t.Helper()
	host := func(p string) (string, bool) {
		for _, m := range resp.Mounts {
			if p == m.ContainerPath || strings.HasPrefix(p, m.ContainerPath+"/") {
				return m.HostPath + p[len(m.ContainerPath):], true
			}
		}
		return "", false
	}
	var env []string
	for k, v := range resp.Envs {
		if h, ok := host(v); ok {
			v = h
		}
		env = append(env, k+"="+v)
	}
	preload, ok := host("/etc/ld.so.preload")
	if !ok {
		t.Fatalf("no ld.so.preload among the mounts %v", resp.Mounts)
	}
	raw, err := os.ReadFile(preload)
	if err != nil {
		t.Fatal(err)
	}
	lib, ok := host(strings.TrimSpace(string(raw)))
	if !ok {
		t.Fatalf("ld.so.preload names %q, which no mount provides", raw)
	}
	// HAMi-core opens itself again by its container path; CUDA_REDIRECT
	// names it where no mount put it there.
	return append(env, "LD_PRELOAD="+lib, "CUDA_REDIRECT="+lib, "CUDA_VISIBLE_DEVICES="+resp.Envs["NVIDIA_VISIBLE_DEVICES"])
}
