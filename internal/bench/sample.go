package bench

import (
	"slices"
	"time"
)

// sample is the outcome of driving a server (or a path to one) for a
// while: every request's latency, the count, the failures, the time spent.
type sample struct {
	lat     []time.Duration
	n       int
	errors  int
	elapsed time.Duration
}

func (s *sample) add(o sample) {
	s.lat = append(s.lat, o.lat...)
	s.n += o.n
	s.errors += o.errors
	s.elapsed += o.elapsed
}

// rate is completed requests (or messages) per second.
func (s *sample) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.n) / s.elapsed.Seconds()
}

// percentile is the latency below which a fraction p of requests fell.
func (s *sample) percentile(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	slices.Sort(s.lat)
	return s.lat[min(len(s.lat)-1, int(float64(len(s.lat))*p))]
}
