package extender

import (
	"sync"
	"sync/atomic"
)

// bindQueue counts the binds under way per node: waiting for the node's
// previous pod to be allocated, or committing.
type bindQueue struct {
	mu    sync.Mutex
	depth map[string]int
	// total is every node's depth summed: filter asks Queued of each node
	// that fits, and with no bind under way the answer needs no lock.
	total atomic.Int64
}

func (q *bindQueue) enter(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.depth == nil {
		q.depth = map[string]int{}
	}
	q.depth[node]++
	q.total.Add(1)
}

func (q *bindQueue) leave(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.depth[node]--; q.depth[node] <= 0 {
		delete(q.depth, node)
	}
	q.total.Add(-1)
}

// Queued is how many binds to node are under way.
func (q *bindQueue) Queued(node string) int {
	if q.total.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depth[node]
}
