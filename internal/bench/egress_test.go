package bench

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestEgressBench(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	res, err := Egress(context.Background(), EgressOptions{Download: 1 << 20, Clients: 4, Duration: 500 * time.Millisecond,
		Rounds: 1, Setups: 4, NetDelay: time.Millisecond, NetRate: 50e6})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Detail())
	for name, v := range map[string]float64{"download": res.DownloadRatio, "small": res.SmallRatio, "floor": res.SmallFloorRatio,
		"download-net": res.DownloadNetRatio, "small-net": res.SmallNetRatio} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s ratio = %v, want a measured one", name, v)
		}
	}
	rows := EgressRows(res)
	if len(rows) != 7 || rows[0].Target.Value != 0.8 || rows[1].Target.Value != 0.8 || rows[3].Target.Value != 0 {
		t.Errorf("EgressRows = %+v, want the -net rows with targets first", rows)
	} else if r := rows[5]; r.Name != "egress-small-vs-floor" || r.Target.Value != 0.95 || !(r.Ratio > 0) || math.Abs(r.Ratio-res.SmallProxyRPS/res.SmallFloorRPS) > 1e-9 {
		t.Errorf("EgressRows[5] = %+v, want the small requests against the blind forwarder (%v / %v req/s), target 0.95", r, res.SmallProxyRPS, res.SmallFloorRPS)
	}
}

// TestEgressOriginIsAtADistance: the -net paths answer as a destination on
// a network would: the download no faster than the rate, a small answer
// no sooner than the delay; the loopback paths do neither.
func TestEgressOriginIsAtADistance(t *testing.T) {
	srv := httptest.NewServer(egressOrigin(EgressOptions{Download: 2 << 20, NetRate: 20e6, NetDelay: 200 * time.Millisecond}))
	defer srv.Close()
	took := func(path string) time.Duration {
		t0 := time.Now()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != 200 || n == 0 {
			t.Fatalf("GET %s = %d, %d bytes, %v", path, resp.StatusCode, n, err)
		}
		return time.Since(t0)
	}
	if d := took("/big-net"); d < 100*time.Millisecond { // 2 MiB at 20 MB/s: 105 ms
		t.Errorf("/big-net took %v, want at least 100 ms (2 MiB at 20 MB/s)", d)
	}
	if d := took("/small-net"); d < 200*time.Millisecond {
		t.Errorf("/small-net took %v, want at least the 200 ms delay", d)
	}
	if d := took("/small"); d >= 200*time.Millisecond {
		t.Errorf("/small took %v, want no delay", d)
	}
}
