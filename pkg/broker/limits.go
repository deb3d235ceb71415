package broker

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// limiter is one conversation's budget: requests in flight and a token
// bucket. Both are checked without waiting; the mutex guards two numbers
// and is never held across I/O.
type limiter struct {
	maxInFlight int32 // <0: unlimited
	inFlight    atomic.Int32

	rate  float64 // tokens per second; <0: unlimited
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (l *limiter) init(lim Limits) {
	l.maxInFlight = int32(min(lim.MaxInFlight, math.MaxInt32))
	l.rate = lim.Rate
	l.burst = float64(lim.Burst)
	l.tokens = l.burst
}

// acquire takes an in-flight slot; release gives it back.
func (l *limiter) acquire() bool {
	if l.maxInFlight < 0 {
		return true
	}
	if l.inFlight.Add(1) > l.maxInFlight {
		l.inFlight.Add(-1)
		return false
	}
	return true
}

func (l *limiter) release() {
	if l.maxInFlight >= 0 {
		l.inFlight.Add(-1)
	}
}

// allow takes a token at now. When the bucket is empty it returns false
// and the whole seconds until a token is back (at least 1), for
// Retry-After.
func (l *limiter) allow(now time.Time) (retryAfter int, ok bool) {
	if l.rate < 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		if d := now.Sub(l.last); d > 0 {
			l.tokens = min(l.burst, l.tokens+d.Seconds()*l.rate)
		}
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		return 0, true
	}
	wait := math.Ceil((1 - l.tokens) / l.rate)
	if wait < 1 || math.IsNaN(wait) {
		wait = 1
	}
	return int(min(wait, 3600)), false
}
