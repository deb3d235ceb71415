package bench

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testimage"
)

func TestProxyBench(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	res, err := Proxy(context.Background(), ProxyOptions{Duration: 400 * time.Millisecond, Rounds: 2, Clients: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkProxyResults(t, res)
}

// TestProxyBenchContainer runs the bench as make bench does: ohd serve as
// its own process, the inner server in a container of the test image,
// which ohd reaches inside the container's network namespace when it runs
// as root.
func TestProxyBenchContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	res, err := Proxy(context.Background(), ProxyOptions{Duration: 400 * time.Millisecond, Rounds: 2, Clients: 4, Image: testimage.Ensure(t)})
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// The limit mode: wrk inside the container's network namespace.
		if len(res) != 4 || res[3].Mode != "limit" {
			t.Fatalf("Proxy() as root returned %+v, want the http, ws, wrk and limit modes", res)
		}
		checkProxyResult(t, res[3])
		res = res[:3]
	}
	checkProxyResults(t, res)
	want := "published port"
	if os.Geteuid() == 0 {
		want = "container network namespace"
	}
	if res[0].Via != want {
		t.Errorf("ohd reached the inner server via %q, want %q", res[0].Via, want)
	}
	for _, r := range res {
		if r.OHDCPU <= 0 || r.OHDCPU > 100*time.Millisecond {
			t.Errorf("%s: ohd CPU per request %v, want a measured, plausible time", r.Mode, r.OHDCPU)
		}
	}
}

func checkProxyResults(t *testing.T, res []ProxyResult) {
	t.Helper()
	if len(res) != 3 || res[0].Mode != "http" || res[1].Mode != "ws" || res[2].Mode != "wrk" {
		t.Fatalf("Proxy() returned %+v, want the http, ws and wrk modes", res)
	}
	for _, r := range res {
		checkProxyResult(t, r)
	}
}

func checkProxyResult(t *testing.T, r ProxyResult) {
	t.Helper()
	line := regexp.MustCompile(`^bench: proxy-(http|ws|wrk|limit) ratio=[0-9]+\.[0-9]{2} p99=[0-9.]+(µs|ms|s|ns)$`)
	t.Log(r.Detail())
	if !line.MatchString(r.Line()) {
		t.Errorf("Line() = %q, want the documented form", r.Line())
	}
	if r.ProxyErrors != 0 || r.DirectErrs != 0 || r.ProxyRate <= 0 || r.DirectRate <= 0 {
		t.Errorf("%s: %+v", r.Mode, r)
	}
}
