package metrics_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/metrics"
)

// The daemon builds one Metrics, hands its methods to the packages that
// report, and serves Handler.
func Example() {
	counts := map[string]int{"running": 2, "stopped": 1} // the daemon counts its store's records here
	m := metrics.New(metrics.Options{
		Conversations: func() map[string]int { return counts },
		Version:       "v1.2.3",
	})

	// pkg/conversation, after a create:
	m.ObserveCreateStep("worktree", 150*time.Millisecond)
	m.ObserveCreateStep("total", 4*time.Second)
	m.CreateResult(true, "")
	// pkg/conversation's broker Backend, in Audit:
	m.BrokerRequest("GET /v1/secrets/{name}", "secret", false, "not_granted")
	// pkg/proxy: proxy.Options{Observer: m.ProxyObserver()}
	m.ProxyObserver().ObserveRequest("create", 201, 4*time.Second)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "ohd_conversations{") || strings.HasPrefix(line, "ohd_conversation_creates_total{") ||
			strings.HasPrefix(line, `ohd_broker_requests_total{code="not_granted"`) {
			fmt.Println(line)
		}
	}
	// Unordered output:
	// ohd_conversations{state="deleted"} 0
	// ohd_conversations{state="failed"} 0
	// ohd_conversations{state="provisioning"} 0
	// ohd_conversations{state="running"} 2
	// ohd_conversations{state="stopped"} 1
	// ohd_conversation_creates_total{result="ok",step="none"} 1
	// ohd_broker_requests_total{code="not_granted",kind="secret",result="refused",route="GET /v1/secrets/{name}"} 1
}

// A package holds an optional *Metrics: nil reports nothing.
func ExampleMetrics_nil() {
	var m *metrics.Metrics // metrics disabled
	m.ContainerStart(false, "ready")
	m.ContainerGone("oom")
	fmt.Println(m.Registry() == nil)
	// Output: true
}
