package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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

// minDriveWait bounds how long a drive goes on past its duration while
// nothing has completed.
const minDriveWait = 30 * time.Second

// driveHTTP runs clients goroutines, each sending req (cloned per client)
// through hc in a loop for d, and returns every latency; a transport error
// or a status other than 200 counts as an error. what names the benchmark
// in its error.
func driveHTTP(ctx context.Context, what string, hc *http.Client, req *http.Request, clients int, d time.Duration) (sample, error) {
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop atomic.Bool
	var completed atomic.Int64
	per := make([]sample, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		wg.Go(func() {
			s := &per[i]
			s.lat = make([]time.Duration, 0, 1<<14)
			r := req.Clone(ctx)
			for !stop.Load() {
				t0 := time.Now()
				resp, err := hc.Do(r)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					s.errors++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s.lat = append(s.lat, time.Since(t0))
				s.n++
				completed.Add(1)
				if resp.StatusCode != http.StatusOK {
					s.errors++
				}
			}
		})
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	// A short drive on a loaded machine (a test's, under -race) may end
	// before a first request completes: it goes on until one has, or for
	// at most minDriveWait more, so it measures a rate rather than none.
	for wait := time.Now().Add(minDriveWait); completed.Load() == 0 && ctx.Err() == nil && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	return collect(ctx, what, per, time.Since(start))
}

// collect sums the per-client samples of one drive.
func collect(ctx context.Context, what string, per []sample, elapsed time.Duration) (sample, error) {
	if err := ctx.Err(); err != nil {
		return sample{}, err
	}
	var all sample
	for _, s := range per {
		all.add(s)
	}
	all.elapsed = elapsed
	if all.n == 0 {
		return all, errors.New("bench " + what + ": nothing completed")
	}
	return all, nil
}

// median is the middle of ds (sorted in a copy; ds is left as it is), 0
// for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
