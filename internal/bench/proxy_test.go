package bench

import (
	"context"
	"regexp"
	"testing"
	"time"
)

func TestProxyBench(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark run")
	}
	res, err := Proxy(context.Background(), ProxyOptions{Duration: 400 * time.Millisecond, Rounds: 2, Clients: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Mode != "http" || res[1].Mode != "ws" {
		t.Fatalf("Proxy() returned %+v, want the http and ws modes", res)
	}
	line := regexp.MustCompile(`^bench: proxy-(http|ws) ratio=[0-9]+\.[0-9]{2} p99=[0-9.]+(µs|ms|s|ns)$`)
	for _, r := range res {
		t.Log(r.Detail())
		if !line.MatchString(r.Line()) {
			t.Errorf("Line() = %q, want the documented form", r.Line())
		}
		if r.ProxyErrors != 0 || r.DirectErrs != 0 || r.ProxyRate <= 0 || r.DirectRate <= 0 {
			t.Errorf("%s: %+v", r.Mode, r)
		}
	}
}
