package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Mock is a mock or fake machine: go-nvml's mock server with stable UUIDs,
// NUMA nodes and PCI bus IDs, plus XID events and failing queries that
// tests (and `vgpud inspect` on a mock node) inject.
type Mock struct {
	*server.Server
	events chan nvml.EventData

	mu      sync.Mutex
	failing map[string]bool
	// procs are the processes declared on each GPU (by UUID), by PID:
	// go-nvml's mock lists none.
	procs map[string]map[int]ProcessSample
	// holding is what keeps each declared process's memory listed, by
	// GPU and PID (mockholders.go).
	holding map[string]map[int]*holders
	// keepAt is where the declared processes are written (KeepProcesses);
	// "" for nowhere.
	keepAt string
	clock  uint64 // the driver's sample timestamps, µs, one per read
	// places answer the topology queries go-nvml's mock leaves out.
	places map[*server.Device]Place
	// unplugged are the GPUs (by UUID) taken off the machine: NVML no
	// longer lists them, and a handle kept from before fails as a GPU
	// fallen off the bus does.
	unplugged map[string]bool
	// migs are the GPUs with MIG profiles, in device order.
	migs []*migGPU
}

// newMock wraps s; migs[i], where not nil, puts GPU i in MIG mode with
// those instances.
func newMock(s *server.Server, node string, places []Place, migs [][]string) (*Mock, error) {
	m := &Mock{Server: s, events: make(chan nvml.EventData, 64), failing: map[string]bool{}, procs: map[string]map[int]ProcessSample{}, holding: map[string]map[int]*holders{}}
	m.places, m.unplugged = map[*server.Device]Place{}, map[string]bool{}
	for i, d := range s.Devices {
		md := d.(*server.Device)
		md.UUID = stableUUID(node, i)
		m.places[md] = places[i]
		m.decorate(md, places[i].NUMA)
	}
	if err := setUpMIG(m, s, migs); err != nil {
		return nil, err
	}
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return len(m.present()), nvml.SUCCESS }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		devs := m.present()
		if i < 0 || i >= len(devs) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return devs[i], nvml.SUCCESS
	}
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, d := range m.present() {
			if d.UUID == uuid {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: m.wait,
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return m, nil
}

// decorate fills in what the stock mock device leaves out or cannot fail.
func (m *Mock) decorate(d *server.Device, numa int) {
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return numa, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
		for i := 0; i < len(d.PciBusID) && i < len(p.BusId)-1; i++ {
			p.BusId[i] = int8(d.PciBusID[i])
		}
		return p, nvml.SUCCESS
	}
	d.GetP2PStatusFunc = func(o nvml.Device, caps nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		p, q, ok := m.pair(d, o)
		if caps != nvml.P2P_CAPS_INDEX_NVLINK || !ok || p.NVLink < 0 || p.NVLink != q.NVLink {
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		p, q, ok := m.pair(d, o)
		switch {
		case !ok:
			return 0, nvml.ERROR_INVALID_ARGUMENT
		case p.PCIe >= 0 && p.PCIe == q.PCIe:
			return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
		case p.NUMA == q.NUMA:
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if m.isFailing(d.UUID) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return d.MemoryInfo, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if m.isFailing(d.UUID) {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		var out []nvml.ProcessInfo
		for _, p := range m.onGPU(d.UUID) {
			out = append(out, nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.UsedBytes})
		}
		return out, nvml.SUCCESS
	}
	// Declared processes are compute ones: none draws, none is an MPS client.
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		now := m.tick()
		var out []nvml.ProcessUtilizationSample
		for _, p := range m.declared(d.UUID) {
			if p.SMPercent >= 0 && now > since {
				out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(p.PID), TimeStamp: now, SmUtil: uint32(p.SMPercent)})
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	// The GPU is idle but for the processes declared on it.
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if m.isFailing(d.UUID) {
			return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Utilization{}, nvml.SUCCESS
	}
}

// pair is where d and o sit; ok is false when o is not one of this
// machine's GPUs.
func (m *Mock) pair(d *server.Device, o nvml.Device) (Place, Place, bool) {
	od, ok := o.(*server.Device)
	if !ok {
		return Place{}, Place{}, false
	}
	q, ok := m.places[od]
	return m.places[d], q, ok
}

// wait is an event set's Wait. It times out on the wall clock, as the
// driver's does: the health watcher's clock times what it does between
// waits, not NVML.
func (m *Mock) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer t.Stop()
	select {
	case e := <-m.events:
		return e, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

func (m *Mock) device(uuid string) (*server.Device, error) {
	for _, d := range m.Devices {
		if md := d.(*server.Device); md.UUID == uuid {
			return md, nil
		}
	}
	return nil, fmt.Errorf("no GPU %s on this mock machine", uuid)
}

// InjectXID delivers a critical XID event for the GPU uuid to the event set
// the health watcher waits on.
func (m *Mock) InjectXID(uuid string, xid uint64) error {
	d, err := m.device(uuid)
	if err != nil {
		return err
	}
	select {
	case m.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: xid}:
		return nil
	default:
		return fmt.Errorf("inject XID %d on %s: event queue full", xid, uuid)
	}
}

// InjectXIDByName is InjectXID for a GPU given by UUID or index.
func (m *Mock) InjectXIDByName(gpu string, xid uint64) error {
	if i, err := strconv.Atoi(gpu); err == nil && i >= 0 && i < len(m.Devices) {
		gpu = m.Devices[i].(*server.Device).UUID
	}
	return m.InjectXID(gpu, xid)
}

// SetFailing makes NVML memory queries of the GPU uuid fail (as a lost GPU
// does) or succeed again.
func (m *Mock) SetFailing(uuid string, failing bool) error {
	if _, err := m.device(uuid); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failing[uuid] = failing
	return nil
}

func (m *Mock) isFailing(uuid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failing[uuid] || m.unplugged[uuid]
}

// present is the machine's GPUs now, in index order.
func (m *Mock) present() []*server.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*server.Device, 0, len(m.Devices))
	for _, d := range m.Devices {
		if md := d.(*server.Device); !m.unplugged[md.UUID] {
			out = append(out, md)
		}
	}
	return out
}

// SetPlugged takes a GPU (UUID or index on the full machine) off the
// machine, as one that falls off the bus or is hot-removed, or puts it
// back.
func (m *Mock) SetPlugged(gpu string, plugged bool) error {
	if i, err := strconv.Atoi(gpu); err == nil && i >= 0 && i < len(m.Devices) {
		gpu = m.Devices[i].(*server.Device).UUID
	}
	if _, err := m.device(gpu); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if plugged {
		delete(m.unplugged, gpu)
	} else {
		m.unplugged[gpu] = true
	}
	return nil
}

// fingerprint names the GPUs present now (Present).
func (m *Mock) fingerprint() string {
	var uuids []string
	for _, d := range m.present() {
		uuids = append(uuids, d.UUID)
	}
	return strings.Join(uuids, ",")
}

// SetProcess declares that process pid uses usedMiB of the GPU (UUID or
// index, or a MIG device's UUID) and smPercent of its SM time (-1: the
// driver gives no sample); usedMiB 0 takes the process off the GPU. The
// mock's process list is this declaration; the PID is a host PID the
// caller chose.
func (m *Mock) SetProcess(gpu string, pid int, usedMiB uint64, smPercent int) error {
	if i, err := strconv.Atoi(gpu); err == nil && i >= 0 && i < len(m.Devices) {
		gpu = m.Devices[i].(*server.Device).UUID
	}
	if _, err := m.device(gpu); err != nil && !slices.ContainsFunc(m.migs, func(g *migGPU) bool { return g.hasDevice(gpu) }) {
		return fmt.Errorf("%w, nor a MIG device of one", err)
	}
	if pid <= 0 || smPercent < -1 || smPercent > 100 {
		return fmt.Errorf("process %d at %d%% SM: want a PID above 0 and an SM share from 0 to 100, or -1", pid, smPercent)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if usedMiB == 0 {
		delete(m.procs[gpu], pid)
		delete(m.holding[gpu], pid)
		m.keep()
		return nil
	}
	h := m.holding[gpu][pid]
	if h == nil {
		h = newHolders(pid)
	}
	m.declare(ProcessSample{GPU: gpu, PID: pid, UsedBytes: usedMiB << 20, SMPercent: smPercent}, h)
	m.keep()
	return nil
}

// declare lists s on its GPU, held by h; m.mu held.
func (m *Mock) declare(s ProcessSample, h *holders) {
	if m.procs[s.GPU] == nil {
		m.procs[s.GPU], m.holding[s.GPU] = map[int]ProcessSample{}, map[int]*holders{}
	}
	m.procs[s.GPU][s.PID], m.holding[s.GPU][s.PID] = s, h
}

func (m *Mock) declared(uuid string) []ProcessSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ProcessSample, 0, len(m.procs[uuid]))
	changed := false
	for pid, p := range m.procs[uuid] {
		// As the driver does, the memory stays listed under the opener's
		// PID until no process that may hold its descriptor is left.
		h := m.holding[uuid][pid]
		var known map[proc]bool
		if h != nil {
			known = maps.Clone(h.known)
		}
		if h == nil || !h.alive() {
			delete(m.procs[uuid], pid)
			delete(m.holding[uuid], pid)
			changed = true
			continue
		}
		changed = changed || !maps.Equal(known, h.known)
		out = append(out, p)
	}
	if changed {
		m.keep()
	}
	slices.SortFunc(out, func(a, b ProcessSample) int { return a.PID - b.PID })
	return out
}

// onGPU is what is declared on the GPU uuid and, where it is in MIG
// mode, on each of its MIG devices: the driver lists an instance's
// processes on its GPU too, which is where the node's sampling reads them.
func (m *Mock) onGPU(uuid string) []ProcessSample {
	out := m.declared(uuid)
	for _, g := range m.migs {
		if g != nil && g.uuid == uuid {
			for _, id := range g.devices() {
				out = append(out, m.declared(id)...)
			}
		}
	}
	return out
}

// tick advances the mock driver's sample clock.
func (m *Mock) tick() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock += 1000
	return m.clock
}
