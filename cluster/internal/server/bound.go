package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// What requests in flight may cost one listener. Any client that reaches
// the port can send a body up to the handlers' limits, and decoding one
// costs about ten times its size: eight 5 MB admission reviews at once
// once took the leader past its memory limit. Bodies are weighed by their
// length; small ones (every real filter, bind and the reviews of real
// pods) are only counted, so a flood of large bodies does not queue them.
const (
	// maxBody is the most any handler here reads; a longer declared body
	// is refused before it is read.
	maxBody = 8 << 20
	// smallBody and below is counted, not weighed.
	smallBody = 256 << 10
	// maxSmall small requests are served at once.
	maxSmall = 64
	// largeBudget bytes of larger bodies are in flight at once: with the
	// decoding factor, about 80 MiB of the leader's heap, and a core at
	// most, since decoding is CPU-bound. A 16 MiB budget let three 5 MB
	// reviews decode at once, more than a two-core node has, while the
	// reviews of real pods must answer within the webhook's 5 s timeout.
	largeBudget = 8 << 20
	// waitForRoom is how long a request waits for its share before it is
	// answered 429: shorter than the apiserver's webhook timeout, so the
	// apiserver sees an answer it can report.
	waitForRoom = 3 * time.Second
	// readTimeout bounds reading a whole request, body included: a client
	// that trickles its body holds its share no longer than this.
	readTimeout = 15 * time.Second
	// maxHeaderBytes bounds a request's headers.
	maxHeaderBytes = 64 << 10
	// HTTP/2 reads a request's body ahead of its handler, up to the flow
	// control windows: with Go's defaults a request waiting for its share
	// holds 1 MiB of heap, outside the budget (fifty at once took the
	// leader's heap up 70 MiB). A window of 64 KiB a request keeps what
	// waits small; a body being decoded is read as fast as the decoder
	// asks. The connection's window stays at Go's 1 MiB: the apiserver
	// sends every review over one connection, and a smaller one would let
	// a few large reviews waiting for their share stall the small ones
	// behind them.
	h2StreamWindow = 64 << 10
	h2ConnWindow   = 1 << 20
	// maxLargeWaiting larger bodies wait for their share at once; more
	// are answered 429 at once. Each one waiting holds its stream's
	// window of the connection's unread: sixteen on the apiserver's one
	// connection would stall every review behind them until they gave
	// up. Eight hold half of it at most.
	maxLargeWaiting = 8
)

// bounder admits requests while their cost fits.
type bounder struct {
	small, large *semaphore.Weighted
	largeWaiting atomic.Int32 // larger bodies waiting for their share
	wait         time.Duration
	onRefused    func()
}

func newBounder() *bounder {
	return &bounder{small: semaphore.NewWeighted(maxSmall), large: semaphore.NewWeighted(largeBudget), wait: waitForRoom}
}

// allow sets how many small requests are served at once.
func (b *bounder) allow(n int) { b.small = semaphore.NewWeighted(int64(n)) }

// wrap serves h to requests that fit, answering 413 or 429 to the rest.
func (b *bounder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.ContentLength
		if n == 0 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			// Probes cost nothing and must answer under any load.
			h.ServeHTTP(w, r)
			return
		}
		if n > maxBody {
			http.Error(w, fmt.Sprintf("request body of %d bytes; at most %d are read", n, maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		if n < 0 {
			// The apiserver and kube-scheduler always say how long their
			// bodies are; one of unknown length would be weighed as the
			// largest and, trickled, hold the whole large budget.
			http.Error(w, "request body of unknown length (chunked); send Content-Length", http.StatusLengthRequired)
			return
		}
		sem, weight := b.small, int64(1)
		if n > smallBody {
			sem, weight = b.large, n
		}
		if !b.acquire(r.Context(), sem, weight) {
			if b.onRefused != nil {
				b.onRefused()
			}
			w.Header().Set("Retry-After", strconv.Itoa(1))
			http.Error(w, "vgpud is busy with other requests; retry", http.StatusTooManyRequests)
			return
		}
		defer sem.Release(weight)
		h.ServeHTTP(w, r)
	})
}

// acquire takes weight of sem, waiting up to b.wait, unless sem is the
// large budget and maxLargeWaiting others already wait for it.
func (b *bounder) acquire(ctx context.Context, sem *semaphore.Weighted, weight int64) bool {
	if sem.TryAcquire(weight) {
		return true
	}
	if sem == b.large {
		if b.largeWaiting.Add(1) > maxLargeWaiting {
			b.largeWaiting.Add(-1)
			return false
		}
		defer b.largeWaiting.Add(-1)
	}
	ctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	return sem.Acquire(ctx, weight) == nil
}
