package deviceplugin

import (
	"context"
	"slices"
	"time"
)

// The waits after a registration, before the plugin says serving: for
// kubelet to read the device list, and to list this replica's pod.

// waitResult is how a wait after registering ended.
type waitResult int

const (
	seen       waitResult = iota
	timedOut              // or ctx ended
	superseded            // a socket event came: Run serves and registers again
)

// superseding reports a socket event Run has yet to handle. The waits
// after a registration give way to it: kubelet may have deleted the
// socket it was to dial for this registration, and only the next refresh
// serves and registers again.
func (s *PluginServer) superseding() bool { return len(s.events) > 0 }

// podsWait bounds the wait for kubelet to list this replica's pod.
const podsWait = 15 * time.Second

// kubeletListsSelf waits until kubelet lists this replica's pod (see
// AwaitKubeletPods), and says how long it waited and how the wait ended.
func (s *PluginServer) kubeletListsSelf(ctx context.Context) (time.Duration, waitResult) {
	if s.kubeletPods == nil {
		return 0, seen
	}
	start := s.clock.Now()
	for {
		names, err := s.kubeletPods(ctx)
		switch {
		case err == nil && slices.Contains(names, s.self):
			return s.clock.Since(start), seen
		case s.superseding():
			return s.clock.Since(start), superseded
		case s.clock.Since(start) >= podsWait:
			return s.clock.Since(start), timedOut
		}
		select {
		case <-ctx.Done():
			return s.clock.Since(start), timedOut
		case <-s.clock.After(100 * time.Millisecond):
		}
	}
}

// listWait bounds the wait for kubelet's ListAndWatch after Register.
const listWait = 5 * time.Second

// listedSince waits until a ListAndWatch stream newer than the count n
// has sent kubelet the devices.
func (s *PluginServer) listedSince(ctx context.Context, n uint64) waitResult {
	timeout := s.clock.NewTimer(listWait)
	defer timeout.Stop()
	poll := s.clock.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		now, grew := s.plugin.Listings()
		if now > n {
			return seen
		}
		select {
		case <-grew:
		case <-poll.C():
			if s.superseding() {
				return superseded
			}
		case <-timeout.C():
			return timedOut
		case <-ctx.Done():
			return timedOut
		}
	}
}
