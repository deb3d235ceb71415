package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ohd-dev/ohd/pkg/metrics"
	"github.com/ohd-dev/ohd/pkg/proxy"
)

// The observer must fit pkg/proxy's interface, also when it comes from a
// nil *Metrics.
var _ proxy.Observer = (*metrics.Metrics)(nil).ProxyObserver()

// series gathers reg and returns every sample of the named metric as
// "label=value,..." → value: counters and gauges by value, histograms by
// sample count (key suffix " count") and sum (" sum").
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := labelKey(m)
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+" count"] = float64(m.GetHistogram().GetSampleCount())
				out[key+" sum"] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("%s: unexpected metric type %v", name, mf.GetType())
			}
		}
	}
	return out
}

func labelKey(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func TestCreate(t *testing.T) {
	m := metrics.New(metrics.Options{})
	// Two successful creates and two failures.
	for range 2 {
		m.ObserveCreateStep("worktree", 2*time.Second)
		m.ObserveCreateStep("broker", 10*time.Millisecond)
		m.ObserveCreateStep("container_create", 100*time.Millisecond)
		m.ObserveCreateStep("container_start", 200*time.Millisecond)
		m.ObserveCreateStep("container_ready", 3*time.Second)
		m.ObserveCreateStep("forward", 50*time.Millisecond)
		m.ObserveCreateStep("total", 6*time.Second)
		m.CreateResult(true, "ignored when ok")
	}
	m.ObserveCreateStep("worktree", time.Second)
	m.CreateResult(false, "container_ready")
	m.CreateResult(false, "/home/alice/secret-repo") // never a label value
	m.ObserveCreateStep("image pull of alice's image", time.Second)

	want := map[string]float64{
		"result=ok,step=none":                2,
		"result=failed,step=container_ready": 1,
		"result=failed,step=other":           1,
	}
	if diff := cmp.Diff(want, series(t, m.Registry(), metrics.NameCreates)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", metrics.NameCreates, diff)
	}
	want = map[string]float64{
		"step=worktree count": 3, "step=worktree sum": 5,
		"step=broker count": 2, "step=broker sum": 0.02,
		"step=container_create count": 2, "step=container_create sum": 0.2,
		"step=container_start count": 2, "step=container_start sum": 0.4,
		"step=container_ready count": 2, "step=container_ready sum": 6,
		"step=forward count": 2, "step=forward sum": 0.1,
		"step=total count": 2, "step=total sum": 12,
		"step=other count": 1, "step=other sum": 1,
	}
	got := series(t, m.Registry(), metrics.NameCreateStepDuration)
	if diff := cmp.Diff(want, got, cmp.Comparer(approx)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", metrics.NameCreateStepDuration, diff)
	}
}

func approx(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

func TestBrokerRequests(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.BrokerRequest("GET /v1/whoami", "", true, "")
	m.BrokerRequest("GET /v1/secrets/{name}", "secret", true, "")
	m.BrokerRequest("GET /v1/secrets/{name}", "secret", true, "")
	m.BrokerRequest("GET /v1/secrets/{name}", "secret", false, "not_granted")
	m.BrokerRequest("POST /v1/git-credential", "git", false, "bad_request")
	m.BrokerRequest("POST /v1/git-credential?action=get", "git", true, "")
	m.BrokerRequest("ANY /v1/llm/{profile}/proxy/{path...}", "llm", false, "bad_gateway")
	m.BrokerRequest("", "", false, "not_found")
	m.BrokerRequest("GET /v1/whoami", "", false, "unauthenticated")
	m.BrokerRequest("GET /v1/whoami", "", false, "a code from a newer broker")
	m.BrokerRequest("GET /v1/secrets/{name}", "secret", true, "not_granted") // allowed: the code is not reported

	want := `
# HELP ohd_broker_requests_total Credential broker requests by route pattern, grant kind, result (allowed, refused) and error code (none when allowed).
# TYPE ohd_broker_requests_total counter
ohd_broker_requests_total{code="bad_gateway",kind="llm",result="refused",route="ANY /v1/llm/{profile}/proxy/{path...}"} 1
ohd_broker_requests_total{code="bad_request",kind="git",result="refused",route="POST /v1/git-credential"} 1
ohd_broker_requests_total{code="none",kind="git",result="allowed",route="ANY /v1/git/{host}/{path...}"} 0
ohd_broker_requests_total{code="none",kind="git",result="allowed",route="POST /v1/git-credential?action=erase"} 0
ohd_broker_requests_total{code="none",kind="git",result="allowed",route="POST /v1/git-credential?action=get"} 1
ohd_broker_requests_total{code="none",kind="git",result="allowed",route="POST /v1/git-credential?action=store"} 0
ohd_broker_requests_total{code="none",kind="llm",result="allowed",route="ANY /v1/llm/{profile}/proxy/{path...}"} 0
ohd_broker_requests_total{code="none",kind="llm",result="allowed",route="GET /v1/llm/{profile}"} 0
ohd_broker_requests_total{code="none",kind="mcp",result="allowed",route="ANY /v1/mcp/{server}/proxy"} 0
ohd_broker_requests_total{code="none",kind="net",result="allowed",route="GET /v1/egress/{dest}"} 0
ohd_broker_requests_total{code="none",kind="none",result="allowed",route="GET /v1/secrets"} 0
ohd_broker_requests_total{code="none",kind="none",result="allowed",route="GET /v1/whoami"} 1
ohd_broker_requests_total{code="none",kind="oauth",result="allowed",route="GET /v1/oauth/{server}/token"} 0
ohd_broker_requests_total{code="none",kind="secret",result="allowed",route="GET /v1/secrets/{name}"} 3
ohd_broker_requests_total{code="not_found",kind="none",result="refused",route="none"} 1
ohd_broker_requests_total{code="not_granted",kind="secret",result="refused",route="GET /v1/secrets/{name}"} 1
ohd_broker_requests_total{code="other",kind="none",result="refused",route="GET /v1/whoami"} 1
ohd_broker_requests_total{code="unauthenticated",kind="none",result="refused",route="GET /v1/whoami"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), metrics.NameBrokerRequests); err != nil {
		t.Error(err)
	}
}

// Label values are bounded: names, paths and invented codes fed where a
// label belongs each collapse into one "other" series.
func TestCardinalityBounded(t *testing.T) {
	m := metrics.New(metrics.Options{})
	before := testutil.CollectAndCount(m.Registry(), metrics.NameBrokerRequests)
	for i := range 1000 {
		name := fmt.Sprintf("secret-%d", i)
		m.BrokerRequest("GET /v1/secrets/"+name, "secret", false, "not_granted")
	}
	if got := testutil.CollectAndCount(m.Registry(), metrics.NameBrokerRequests); got != before+1 {
		t.Errorf("after 1000 secret names as routes: %d series, want %d (one more)", got, before+1)
	}
	if got := series(t, m.Registry(), metrics.NameBrokerRequests)["code=not_granted,kind=secret,result=refused,route=other"]; got != 1000 {
		t.Errorf("route=other counted %v, want 1000", got)
	}

	for i := range 1000 {
		m.BrokerRequest(fmt.Sprintf("GET /v1/x%d", i), fmt.Sprintf("kind%d", i), i%2 == 0, fmt.Sprintf("code%d", i))
		m.ObserveCreateStep(fmt.Sprintf("step%d", i), time.Millisecond)
		m.CreateResult(false, fmt.Sprintf("step%d", i))
		m.ContainerStart(false, fmt.Sprintf("step%d", i))
		m.ContainerGone(fmt.Sprintf("action%d", i))
	}
	o := m.ProxyObserver()
	for code := -10; code < 6000; code++ {
		o.ObserveRequest(fmt.Sprintf("/api/conversations/%d", code), code, time.Millisecond)
		o.WebSocketOpened()
		o.WebSocketClosed(code, time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		max  int
	}{
		// allowed and refused routes, plus the two "other" series above
		{metrics.NameBrokerRequests, before + 3},
		{metrics.NameCreateStepDuration, 8},    // seven steps and other
		{metrics.NameCreates, 2},               // ok, other
		{metrics.NameContainerStarts, 2},       // ok, other
		{metrics.NameContainerDeaths, 4},       // die, oom, destroy, other
		{metrics.NameProxyRequests, 70},        // one route (other) by ~60 known statuses and other
		{metrics.NameProxyDuration, 6},         // one route by five classes and other
		{metrics.NameWebSocketsClosed, 16 + 4}, // 1000-1015, 4001, 3xxx, 4xxx, other
		{metrics.NameWebSocketsOpen, 1},
	} {
		if got := testutil.CollectAndCount(m.Registry(), tc.name); got > tc.max || got == 0 {
			t.Errorf("%s: %d series, want 1 to %d", tc.name, got, tc.max)
		}
	}
}

func TestProxyObserver(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var o proxy.Observer = m.ProxyObserver()
	o.ObserveRequest("create", http.StatusCreated, 2*time.Second)
	o.ObserveRequest("count", http.StatusOK, time.Millisecond)
	o.ObserveRequest("count", http.StatusOK, time.Millisecond)
	o.ObserveRequest("count", http.StatusUnauthorized, time.Millisecond)
	o.ObserveRequest("forward", http.StatusBadGateway, 10*time.Millisecond)
	o.ObserveRequest("forward", 799, 10*time.Millisecond) // an inner server's invention
	o.ObserveRequest("events", http.StatusSwitchingProtocols, 90*time.Second)
	for range 3 {
		o.WebSocketOpened()
	}
	o.WebSocketClosed(4001, time.Second)
	o.WebSocketClosed(1006, time.Second)

	want := map[string]float64{
		"code=201,route=create":    1,
		"code=200,route=count":     2,
		"code=401,route=count":     1,
		"code=502,route=forward":   1,
		"code=other,route=forward": 1,
		"code=101,route=events":    1,
	}
	if diff := cmp.Diff(want, series(t, m.Registry(), metrics.NameProxyRequests)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", metrics.NameProxyRequests, diff)
	}
	want = map[string]float64{
		"class=2xx,route=create count": 1, "class=2xx,route=create sum": 2,
		"class=2xx,route=count count": 2, "class=2xx,route=count sum": 0.002,
		"class=4xx,route=count count": 1, "class=4xx,route=count sum": 0.001,
		"class=5xx,route=forward count": 1, "class=5xx,route=forward sum": 0.01,
		"class=other,route=forward count": 1, "class=other,route=forward sum": 0.01,
		"class=1xx,route=events count": 1, "class=1xx,route=events sum": 90,
	}
	if diff := cmp.Diff(want, series(t, m.Registry(), metrics.NameProxyDuration), cmp.Comparer(approx)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", metrics.NameProxyDuration, diff)
	}
	want = map[string]float64{"code=4001": 1, "code=1006": 1}
	if diff := cmp.Diff(want, series(t, m.Registry(), metrics.NameWebSocketsClosed)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", metrics.NameWebSocketsClosed, diff)
	}
	if diff := cmp.Diff(map[string]float64{"": 1}, series(t, m.Registry(), metrics.NameWebSocketsOpen)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", metrics.NameWebSocketsOpen, diff)
	}
}

func TestContainers(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.ContainerStart(true, "")
	m.ContainerStart(true, "ready") // ok: the step is not reported
	m.ContainerStart(false, "ready")
	m.ContainerStart(false, "create")
	m.ContainerStart(false, "create")
	m.ContainerStart(false, "")
	m.ContainerGone("die")
	m.ContainerGone("oom")
	m.ContainerGone("die")
	m.ContainerGone("kill")

	want := `
# HELP ohd_container_starts_total Container starts (at create and restart) by result (ok, failed) and the step that failed (create, start, ready; none when ok).
# TYPE ohd_container_starts_total counter
ohd_container_starts_total{result="failed",step="create"} 2
ohd_container_starts_total{result="failed",step="none"} 1
ohd_container_starts_total{result="failed",step="ready"} 1
ohd_container_starts_total{result="ok",step="none"} 2
# HELP ohd_container_deaths_total Containers of running conversations that died or were removed behind ohd's back, by engine action (die, oom, destroy).
# TYPE ohd_container_deaths_total counter
ohd_container_deaths_total{action="destroy"} 0
ohd_container_deaths_total{action="die"} 2
ohd_container_deaths_total{action="oom"} 1
ohd_container_deaths_total{action="other"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), metrics.NameContainerStarts, metrics.NameContainerDeaths); err != nil {
		t.Error(err)
	}
}

// The conversations gauge is whatever the callback says at scrape time,
// so it follows the store through any sequence of changes.
func TestConversations(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int{"running": 2, "failed": 1}
	m := metrics.New(metrics.Options{Conversations: func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range counts {
			out[k] = v
		}
		return out
	}})
	check := func(want map[string]float64) {
		t.Helper()
		if diff := cmp.Diff(want, series(t, m.Registry(), metrics.NameConversations)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", metrics.NameConversations, diff)
		}
	}
	check(map[string]float64{
		"state=provisioning": 0, "state=running": 2, "state=stopped": 0, "state=failed": 1, "state=deleted": 0,
	})
	mu.Lock()
	counts = map[string]int{"stopped": 1, "deleted": 2, "paused": 3, "hibernating": 1}
	mu.Unlock()
	check(map[string]float64{
		"state=provisioning": 0, "state=running": 0, "state=stopped": 1, "state=failed": 0, "state=deleted": 2,
		"state=other": 4,
	})

	none := metrics.New(metrics.Options{})
	if n := testutil.CollectAndCount(none.Registry(), metrics.NameConversations); n != 0 {
		t.Errorf("without a callback: %d %s series, want none", n, metrics.NameConversations)
	}
}

// A scrape through Handler carries every metric with its HELP and TYPE.
func TestHandler(t *testing.T) {
	m := metrics.New(metrics.Options{Version: "v1.2.3", Conversations: func() map[string]int { return map[string]int{"running": 1} }})
	// One event of each kind, so that every vector has a series.
	m.ObserveCreateStep("total", time.Second)
	m.CreateResult(true, "")
	m.BrokerRequest("GET /v1/whoami", "", true, "")
	o := m.ProxyObserver()
	o.ObserveRequest("get", 200, time.Millisecond)
	o.WebSocketOpened()
	o.WebSocketClosed(1000, time.Second)
	m.ContainerStart(true, "")
	m.ContainerGone("die")

	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200:\n%s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain", ct)
	}
	text := string(body)
	for _, tc := range []struct{ name, typ string }{
		{metrics.NameConversations, "gauge"},
		{metrics.NameCreateStepDuration, "histogram"},
		{metrics.NameCreates, "counter"},
		{metrics.NameBrokerRequests, "counter"},
		{metrics.NameProxyRequests, "counter"},
		{metrics.NameProxyDuration, "histogram"},
		{metrics.NameWebSocketsOpen, "gauge"},
		{metrics.NameWebSocketsClosed, "counter"},
		{metrics.NameContainerStarts, "counter"},
		{metrics.NameContainerDeaths, "counter"},
		{metrics.NameBuildInfo, "gauge"},
		{"go_goroutines", "gauge"},
		{"promhttp_metric_handler_requests_total", "counter"},
	} {
		if !strings.Contains(text, "\n# HELP "+tc.name+" ") {
			t.Errorf("scrape has no HELP line for %s", tc.name)
		}
		if !strings.Contains(text, "\n# TYPE "+tc.name+" "+tc.typ+"\n") {
			t.Errorf("scrape has no TYPE line %q", "# TYPE "+tc.name+" "+tc.typ)
		}
	}
	for _, line := range []string{
		`ohd_conversations{state="running"} 1`,
		`ohd_build_info{version="v1.2.3"} 1`,
		`ohd_conversation_create_step_duration_seconds_count{step="total"} 1`,
		`ohd_container_deaths_total{action="die"} 1`,
	} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("scrape has no line %q", line)
		}
	}
	if runtime.GOOS == "linux" && !strings.Contains(text, "\n# TYPE process_cpu_seconds_total counter\n") {
		t.Error("scrape has no process collector series on linux")
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint = %v, %v; want no problems", problems, err)
	}
}

// Two Metrics do not share series: each has its own registry, never the
// process-wide default one.
func TestOwnRegistry(t *testing.T) {
	a, b := metrics.New(metrics.Options{}), metrics.New(metrics.Options{})
	a.ContainerGone("die")
	if got := series(t, b.Registry(), metrics.NameContainerDeaths)["action=die"]; got != 0 {
		t.Errorf("second Metrics counted %v deaths, want 0", got)
	}
	if got := series(t, prometheus.DefaultGatherer, metrics.NameContainerDeaths); len(got) != 0 {
		t.Errorf("default registry holds %v, want nothing of ohd's", got)
	}
}

// Every method is a no-op on a nil *Metrics.
func TestNil(t *testing.T) {
	var m *metrics.Metrics
	m.ObserveCreateStep("total", time.Second)
	m.CreateResult(true, "")
	m.CreateResult(false, "worktree")
	m.BrokerRequest("GET /v1/whoami", "", true, "")
	m.ContainerStart(false, "ready")
	m.ContainerGone("die")
	for _, o := range []proxy.Observer{m.ProxyObserver(), metrics.ProxyObserver{}} {
		o.ObserveRequest("get", 200, time.Millisecond)
		o.WebSocketOpened()
		o.WebSocketClosed(1000, time.Second)
	}
	if r := m.Registry(); r != nil {
		t.Errorf("nil Metrics: Registry() = %v, want nil", r)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Metrics: Handler answered %d, want 404", rec.Code)
	}
}

// Reports from many goroutines while scraping: counts add up, and -race
// finds no race.
func TestConcurrent(t *testing.T) {
	m := metrics.New(metrics.Options{Conversations: func() map[string]int { return map[string]int{"running": 1} }})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			o := m.ProxyObserver()
			for range each {
				m.BrokerRequest("GET /v1/secrets/{name}", "secret", true, "")
				o.WebSocketOpened()
				o.WebSocketClosed(1000, time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	wg.Wait()
	got := series(t, m.Registry(), metrics.NameBrokerRequests)["code=none,kind=secret,result=allowed,route=GET /v1/secrets/{name}"]
	if got != workers*each {
		t.Errorf("broker requests = %v, want %d", got, workers*each)
	}
	if got := series(t, m.Registry(), metrics.NameWebSocketsOpen)[""]; got != 0 {
		t.Errorf("websockets open = %v, want 0", got)
	}
	if got := series(t, m.Registry(), metrics.NameWebSocketsClosed)["code=1000"]; got != workers*each {
		t.Errorf("websockets closed = %v, want %d", got, workers*each)
	}
}

func BenchmarkBrokerRequest(b *testing.B) {
	m := metrics.New(metrics.Options{})
	b.ReportAllocs()
	for b.Loop() {
		m.BrokerRequest("GET /v1/secrets/{name}", "secret", true, "")
	}
}

func BenchmarkObserveRequest(b *testing.B) {
	o := metrics.New(metrics.Options{}).ProxyObserver()
	b.ReportAllocs()
	for b.Loop() {
		o.ObserveRequest("forward", http.StatusOK, time.Millisecond)
	}
}

func TestEgressConnection(t *testing.T) {
	m := metrics.New(metrics.Options{})
	m.EgressConnection(true, "", 10, 20)
	m.EgressConnection(false, "loopback", 0, 0)
	m.EgressConnection(false, "a reason from a newer broker", 0, 0)
	if got := testutil.ToFloat64(m.EgressCounter("allowed")); got != 1 {
		t.Errorf("allowed = %v, want 1", got)
	}
	for v, want := range map[string]float64{"loopback": 1, "other": 1, "private": 0} {
		if got := testutil.ToFloat64(m.EgressCounter(v)); got != want {
			t.Errorf("verdict %s = %v, want %v", v, got, want)
		}
	}
}
