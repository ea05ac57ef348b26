package extender

import "sync"

// bindQueue counts the binds under way per node: waiting for the node's
// previous pod to be allocated, or committing.
type bindQueue struct {
	mu    sync.Mutex
	depth map[string]int
}

func (q *bindQueue) enter(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.depth == nil {
		q.depth = map[string]int{}
	}
	q.depth[node]++
}

func (q *bindQueue) leave(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.depth[node]--; q.depth[node] <= 0 {
		delete(q.depth, node)
	}
}

// Queued is how many binds to node are under way.
func (q *bindQueue) Queued(node string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depth[node]
}
