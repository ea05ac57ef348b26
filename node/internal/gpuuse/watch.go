// Package gpuuse is what the node does with each container's measured GPU
// use, around the usage package's rules: it builds each generation's
// enforcer, remembers what the enforcer must across generations, tells
// of its verdicts (metrics, logs, Events), hands the runtime hook's
// grants to it, and shows and publishes the latest sample.
package gpuuse

import (
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/vgpud/vgpud/node/internal/gpu"
	"github.com/vgpud/vgpud/node/internal/nodepods"
	"github.com/vgpud/vgpud/node/internal/usage"
	"github.com/vgpud/vgpud/protocol/podevents"
)

// Metrics are what the node's metrics take from usage.
type Metrics interface {
	KillsFrom0(namespace, pod, container, uuid string)
	ForgetPod(namespace, pod string)
	Sampled(took time.Duration)
	Killed(k usage.Kill)
	ReportUsage(last func() usage.Outcome)
}

// Monitor is the node's GPU-usage part for the role's life: one enforcer
// per generation of GPUs, one register of granted containers and one
// memory across them.
type Monitor struct {
	node    string
	metrics Metrics
	clock   clock.WithTicker
	log     *slog.Logger
	// containers are the ones the hook granted a slice, by runtime ID:
	// the enforcer attributes GPU processes to them.
	containers *usage.Containers

	mu         sync.Mutex
	opts       Options // the node's, once Configure has set them
	configured bool
	enforcer   *usage.Enforcer // nil until the GPUs are found
	rec        *recorder
	mem        *usage.Memory // what the enforcer remembers, across generations
}

// New returns the part for node.
func New(node string, metrics Metrics, clk clock.WithTicker, log *slog.Logger) *Monitor {
	return &Monitor{node: node, metrics: metrics, clock: clk, log: log, containers: usage.NewContainers()}
}

// Configure sets the settings the monitor runs under: the node's, once
// its overrides are read, on a node where the runtime hook runs (hook)
// or does not. Call it before NewEnforcer, Publish or Snapshot; the
// hook's grants (Granted) need none.
func (w *Monitor) Configure(opts Options, hook bool) {
	if opts.GPUUsage == Auto {
		w.log.Info("GPU usage mode chosen", "component", "usage", "setting", Auto, "runtime_hook", hook, "mode", opts.ForHook(hook).GPUUsage)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.opts, w.configured = opts.ForHook(hook), true
}

// options are the settings Configure set. Read before, they would be
// none, and usage off by mistake: that is a bug of the caller's.
func (w *Monitor) options() Options {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.configured {
		panic("gpuuse: the Monitor's settings read before Configure")
	}
	return w.opts
}

// NewEnforcer samples lib's processes for the containers the hook
// registered, under the node's settings (validated: the mode parses).
// Its Events go through events, the role's, which outlives a rescan; so
// does what it remembers (usageMemory).
func (w *Monitor) NewEnforcer(lib nvml.Interface, devs []gpu.Device, madeParents func() map[string]string, pods *nodepods.Index, events podevents.Sink) *usage.Enforcer {
	opts := w.options()
	mode, _ := usage.ParseMode(opts.GPUUsage)
	sample := usage.NVMLSampler(lib, devs, madeParents)
	event := events.As(corev1.EventTypeWarning, "Enforcing")
	rec := &recorder{metrics: w.metrics, pods: pods, event: event, mode: mode,
		margin: opts.GPUUsageMargin, reported: map[string]bool{}, killed: map[string]int{}, log: w.log.With("component", "usage")}
	host := usage.Procfs{Root: "/proc"}
	rules := usage.Rules{Mode: mode, Margin: uint64(opts.GPUUsageMargin) << 20, Reserve: uint64(opts.GPUUsageReserve) << 20}
	e := usage.NewEnforcer(usage.Options{Rules: rules, Period: opts.GPUUsagePeriod}, sample, w.containers, host,
		func(ns, pod, uid string) []string { return runningContainers(pods.Get(ns, pod), uid) }, w.memory(host), rec, w.clock, w.log.With("component", "usage"))
	w.metrics.ReportUsage(func() usage.Outcome { v, _ := e.Last(); return v })
	w.mu.Lock()
	w.enforcer, w.rec = e, rec
	w.mu.Unlock()
	return e
}

// memory is what the enforcer remembers, read from the node's file
// once for the role's life: every generation's enforcer shares it.
func (w *Monitor) memory(host usage.Procfs) *usage.Memory {
	record := w.record()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mem == nil {
		m, err := usage.LoadMemory(record, host.BootID())
		if err != nil {
			w.log.Warn("GPU process holders not remembered: starting fresh, ending nothing for one period", "err", err)
		}
		w.mem = m
	}
	return w.mem
}

// record is this node's record file; "" for none.
func (w *Monitor) record() string {
	return strings.ReplaceAll(w.options().GPUUsageRecord, "{node}", w.node)
}

// KeepMockProcesses has the mock's process list outlive the process, as
// a driver's outlives vgpud's restarts: beside the enforcer's record.
func (w *Monitor) KeepMockProcesses(m *gpu.Mock) error {
	rec := w.record()
	if rec == "" {
		return nil
	}
	return m.KeepProcesses(filepath.Join(filepath.Dir(rec), "mock-processes-"+w.node+".json"))
}

// runningContainers are the runtime's IDs of pod's running containers,
// where pod is the one with that UID.
func runningContainers(pod *corev1.Pod, uid string) []string {
	if pod == nil || string(pod.UID) != uid {
		return nil
	}
	var ids []string
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range list {
			if _, id, ok := strings.Cut(st.ContainerID, "://"); ok && st.State.Running != nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
