package nrihook

import (
	"time"
)

// Connected reports whether the runtime is connected now, and how many
// times it connected.
func (h *Hook) Connected() (bool, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up, h.conns
}

// enter counts a call in, unless the hook is stopping.
func (h *Hook) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.inflight++
	return true
}

// stopping says whether drain has begun.
func (h *Hook) stopping() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}

func (h *Hook) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inflight--
	if h.closing && h.inflight == 0 {
		close(h.drained)
	}
}

// drain makes the hook refuse every call from now, and returns once no
// call is being answered, or after max.
func (h *Hook) drain(max time.Duration) {
	h.mu.Lock()
	if !h.closing {
		h.closing = true
		if h.inflight == 0 {
			close(h.drained)
		}
	}
	h.mu.Unlock()
	timeout := h.clock.NewTimer(max)
	defer timeout.Stop()
	select {
	case <-h.drained:
	case <-timeout.C():
	}
}

func (h *Hook) setDown() {
	h.mu.Lock()
	h.up = false
	h.mu.Unlock()
}
