package integration

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

// scrape parses Prometheus text exposition into "name{labels}" → value
// (labels as the exposition prints them, sorted by the client library).
func scrape(t testing.TB, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestBackendMetricsCountWhatHappened(t *testing.T) {
	eachBackend(t, func(t *testing.T, be backend) {
		metricsAddr := freePort(t)
		d := be.daemon(t, "--metrics-listen", metricsAddr)
		ctx := context.Background()
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		if _, err := d.ohctlIn("s3cret", "secret", "set", "api"); err != nil {
			t.Fatal(err)
		}

		// Two conversations through the API, one through ohctl; one create
		// fails at the worktree step.
		a, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
		b, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree", "--grant-secret", "api")
		if r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": brokenRepo(t)}, "worktree": true}); r.Status < 500 {
			t.Fatalf("the broken create = %d %s", r.Status, r.Body)
		}
		// Broker: three allowed, two refused.
		cl := brokerClient(c)
		for i := 0; i < 3; i++ {
			if _, err := cl.Secret(ctx, "api"); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 2; i++ {
			if _, err := cl.Secret(ctx, "nope"); !errors.Is(err, broker.ErrNotGranted) {
				t.Fatal(err)
			}
		}
		// Proxy: forwarded requests and a WebSocket opened and closed.
		for i := 0; i < 4; i++ {
			if r := d.call("GET", "/api/conversations/"+a+"/echo/x", nil); r.Status != 200 {
				t.Fatalf("forward = %d", r.Status)
			}
		}
		conn, _, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/events/"+a, &websocket.DialOptions{HTTPHeader: http.Header{"X-Session-Api-Key": {d.apiKey()}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := conn.Read(ctx); err != nil {
			t.Fatal(err)
		}
		conn.Close(websocket.StatusNormalClosure, "done")
		// A container removed behind ohd's back, one conversation deleted.
		bc := d.record(b)
		be.kill(t, bc.ContainerID)
		waitFor(t, 5*time.Second, "b to be stopped", func() bool { return d.record(b).State == store.StateStopped })
		d.call("DELETE", "/api/conversations/"+a, nil)

		// The API's /metrics needs the key; --metrics-listen does not.
		if r := d.call("GET", "/metrics", nil, "X-Session-API-Key", ""); r.Status != 401 {
			t.Errorf("/metrics without a key = %d, want 401", r.Status)
		}
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		viaAPI := d.call("GET", "/metrics", nil)
		if viaAPI.Status != 200 {
			t.Fatalf("/metrics with the key = %d", viaAPI.Status)
		}
		m := scrape(t, string(body))
		want := map[string]float64{
			`ohd_conversations{state="running"}`:                                                                          1,
			`ohd_conversations{state="stopped"}`:                                                                          1,
			`ohd_conversations{state="deleted"}`:                                                                          1,
			`ohd_conversations{state="failed"}`:                                                                           1,
			`ohd_conversation_creates_total{result="ok",step="none"}`:                                                     3,
			`ohd_conversation_creates_total{result="failed",step="worktree"}`:                                             1,
			`ohd_container_starts_total{result="ok",step="none"}`:                                                         3,
			`ohd_broker_requests_total{code="none",kind="secret",result="allowed",route="GET /v1/secrets/{name}"}`:        3,
			`ohd_broker_requests_total{code="not_granted",kind="secret",result="refused",route="GET /v1/secrets/{name}"}`: 2,
			`ohd_proxy_requests_total{code="200",route="forward"}`:                                                        4,
			`ohd_proxy_requests_total{code="201",route="create"}`:                                                         2,
			`ohd_proxy_websockets_open`:                                                                                   0,
			`ohd_conversation_create_step_duration_seconds_count{step="total"}`:                                           3,
			`ohd_conversation_create_step_duration_seconds_count{step="worktree"}`:                                        3,
			`ohd_conversation_create_step_duration_seconds_count{step="container_ready"}`:                                 3,
		}
		for k, v := range want {
			got, ok := m[k]
			if !ok {
				t.Errorf("metrics lack %s", k)
			} else if got != v {
				t.Errorf("%s = %v, want %v", k, got, v)
			}
		}
		sum := func(prefix string) float64 {
			n := 0.0
			for k, v := range m {
				if strings.HasPrefix(k, prefix) {
					n += v
				}
			}
			return n
		}
		if n := sum("ohd_proxy_websockets_closed_total"); n != 1 {
			t.Errorf("websockets closed = %v, want 1", n)
		}
		// docker rm -f reports die then destroy, a pod's deletion its
		// containers' end then the pod's: the first one stops the
		// conversation and is the one counted.
		if n := sum("ohd_container_deaths_total"); n != 1 {
			t.Errorf("container deaths = %v, want 1", n)
		}
		if !strings.Contains(string(viaAPI.Body), "ohd_conversations{") {
			t.Error("the API's /metrics does not serve the same series")
		}
		for _, secret := range []string{"s3cret", d.apiKey()} {
			if strings.Contains(string(body), secret) {
				t.Error("a secret appears in the metrics")
			}
		}
		d.ohctl("rm", b)
		d.ohctl("rm", c.ID)
	})
}
