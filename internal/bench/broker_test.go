package bench

import (
	"context"
	"regexp"
	"testing"
	"time"
)

func TestBrokerBench(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	res, err := Broker(context.Background(), BrokerOptions{Duration: 300 * time.Millisecond, Rounds: 1, Clients: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("Broker() returned %d results, want 4", len(res))
	}
	line := regexp.MustCompile(`^bench: broker-[a-z0-9-]+ ratio=[0-9]+\.[0-9]{2} p99=[0-9.]+(µs|ms|s|ns)$`)
	for _, r := range res {
		t.Log(r.Detail())
		if !line.MatchString(r.Line()) {
			t.Errorf("Line() = %q, want the documented form", r.Line())
		}
		if r.BrokerErrors != 0 || r.BaselineErrs != 0 || r.BrokerRPS <= 0 || r.BaselineRPS <= 0 {
			t.Errorf("%s: %+v", r.Mode, r)
		}
	}
}
