package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTarget(t *testing.T) {
	tests := []struct {
		t     Target
		ratio float64
		str   string
		meets bool
	}{
		{Target{AtMost: true, Value: 1.1}, 1.05, "≤ 1.10", true},
		{Target{AtMost: true, Value: 1.1}, 1.1, "≤ 1.10", true},
		{Target{AtMost: true, Value: 1.1}, 1.2, "≤ 1.10", false},
		{Target{Value: 0.91}, 0.95, "≥ 0.91", true},
		{Target{Value: 0.91}, 0.5, "≥ 0.91", false},
		{Target{Value: 0.91}, 0.9088, "≥ 0.91", true}, // shown as 0.91
		{Target{Value: 0.91}, 0.9049, "≥ 0.91", false},
		{Target{AtMost: true, Value: 1.1}, 1.104, "≤ 1.10", true},
		{Target{Value: 0.91}, math.NaN(), "≥ 0.91", false},
		{Target{}, 1, "—", false},
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.str {
			t.Errorf("%+v.String() = %q, want %q", tt.t, got, tt.str)
		}
		if got := tt.t.Meets(tt.ratio); got != tt.meets {
			t.Errorf("%+v.Meets(%v) = %v, want %v", tt.t, tt.ratio, got, tt.meets)
		}
	}
}

func TestRows(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	var rows []Row
	rows = append(rows, BrokerRows([]Result{
		{Mode: "keepalive", Clients: 16, BrokerRPS: 41234.4, BaselineRPS: 43000, Ratio: 0.9589, BrokerP99: ms(3), BaselineP99: ms(2.5)},
		{Mode: "newconn-1client", Clients: 1, BrokerRPS: 5000, BaselineRPS: 7000, Ratio: 5000.0 / 7000, BrokerP99: ms(1.2), BaselineP99: ms(1.1)},
	})...)
	rows = append(rows, ProxyRows([]ProxyResult{
		{Mode: "http", ProxyRate: 9000, DirectRate: 10000, Ratio: 0.9},
		{Mode: "ws", ProxyRate: 80000, DirectRate: 81000, Ratio: 80.0 / 81},
	})...)
	rows = append(rows, CreateRows([]CreateResult{
		{Op: "create", Ratio: 1.04, OHD: Breakdown{Total: Stat{Median: ms(812.34)}}, Baseline: Breakdown{Total: Stat{Median: ms(780)}}},
		{Op: "remove", Ratio: 1.52, OHD: Breakdown{Total: Stat{Median: ms(321.8)}}, Baseline: Breakdown{Total: Stat{Median: ms(212)}}},
	})...)
	rows = append(rows, GoRows([]GoBenchmark{
		{Package: "github.com/ohd-dev/ohd/pkg/broker", Name: "BenchmarkWhoami-2", Iterations: 20000,
			Metrics: []Metric{{55012, "ns/op"}, {5120, "B/op"}, {61, "allocs/op"}}},
		{Package: "github.com/ohd-dev/ohd/pkg/runtime", Name: "BenchmarkStartRemove-2", Iterations: 3,
			Metrics: []Metric{{812345678, "ns/op"}, {120, "create-ms/op"}, {40.5, "ready-ms/op"}}},
		{Package: "github.com/ohd-dev/ohd/pkg/runtime", Name: "BenchmarkX", Status: "skip", Reason: "x_test.go:1: skipped: no docker"},
		{Package: "github.com/ohd-dev/ohd/pkg/metrics", Status: "fail", Reason: "[build failed]\tx.go:1: undefined"},
	})...)
	var b strings.Builder
	if err := RenderTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"BENCHMARK                           OHD                                           BASELINE     RATIO  TARGET  VERDICT",
		"broker-keepalive                    41234 req/s                                   43000 req/s  0.96   ≥ 0.80  meets",
		"broker-newconn-1client              5000 req/s                                    7000 req/s   0.71   ≥ 0.80  misses",
		"broker-keepalive-p99                3ms p99                                       2.5ms p99    1.20   ≤ 1.50  meets",
		"broker-newconn-1client-p99          1.2ms p99                                     1ms bound    1.20   ≤ 1.00  misses",
		"proxy-http                          9000 req/s                                    10000 req/s  0.90   ≥ 0.85  meets",
		"proxy-ws                            80000 msg/s                                   81000 msg/s  0.99   ≥ 0.80  meets",
		"create                              812.3ms                                       780ms        1.04   ≤ 1.08  meets",
		"remove                              321.8ms                                       212ms        1.52   ≤ 1.08  misses",
		"pkg/broker BenchmarkWhoami-2        55.0µs/op                                     —            —      —       —",
		"pkg/runtime BenchmarkStartRemove-2  812ms/op, 120 create-ms/op, 40.5 ready-ms/op  —            —      —       —",
		"pkg/runtime BenchmarkX              skipped: x_test.go:1: skipped: no docker      —            —      —       —",
		"pkg/metrics                         failed: [build failed] x.go:1: undefined      —            —      —       failed",
		"",
	}, "\n")
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("RenderTable() mismatch (-want +got):\n%s", diff)
	}
}

func TestFmtGoMetrics(t *testing.T) {
	tests := []struct {
		in   []Metric
		want string
	}{
		{nil, ""},
		{[]Metric{{1500, "ns/op"}}, "1.50µs/op"},
		{[]Metric{{2, "x/op"}, {1.5e9, "ns/op"}, {10, "MB/s"}}, "1.50s/op, 2 x/op"},
		{[]Metric{{0.12345, "ratio"}}, "0.123 ratio"},
	}
	for _, tt := range tests {
		if got := fmtGoMetrics(tt.in); got != tt.want {
			t.Errorf("fmtGoMetrics(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFmtNs(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.00ns"},
		{12.345, "12.3ns"},
		{999, "999ns"},
		{1500, "1.50µs"},
		{55012, "55.0µs"},
		{812345678, "812ms"},
		{2.034e9, "2.03s"},
		{125e9, "125s"},
	}
	for _, tt := range tests {
		if got := fmtNs(tt.in); got != tt.want {
			t.Errorf("fmtNs(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
