package bench

import (
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := `Running 2s test @ http://127.0.0.1:1/api/conversations/x/echo/bench
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.20ms  300.00us   9.00ms   80.00%
  Latency Distribution
     50%    1.10ms
     75%    1.30ms
     90%    1.60ms
     99%    2.50ms
  41234 requests in 2.00s, 20.00MB read
  Non-2xx or 3xx responses: 3
Requests/sec:  20617.00
`
	s, p99, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if s.n != 41234 || s.elapsed != 2*time.Second || s.errors != 3 || p99 != 2500*time.Microsecond {
		t.Errorf("parseWrk = n %d elapsed %v errors %d p99 %v", s.n, s.elapsed, s.errors, p99)
	}
	if _, _, err := parseWrk("wrk: connection refused"); err == nil {
		t.Error("parseWrk of no summary succeeded")
	}
}
