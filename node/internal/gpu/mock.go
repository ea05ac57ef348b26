package gpu

import (
	"fmt"
	"strconv"
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
}

func newMock(s *server.Server, node string, numa []int) *Mock {
	m := &Mock{Server: s, events: make(chan nvml.EventData, 64), failing: map[string]bool{}}
	for i, d := range s.Devices {
		md := d.(*server.Device)
		md.UUID = stableUUID(node, i)
		m.decorate(md, numa[i])
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: m.wait,
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return m
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
	// Nothing runs on a mock GPU: it is idle.
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if m.isFailing(d.UUID) {
			return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Utilization{}, nvml.SUCCESS
	}
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
	return m.failing[uuid]
}
