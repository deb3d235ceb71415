package metrics_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
	"github.com/ohd-dev/ohd/pkg/metrics"
)

// A real broker's audit records, one per route and a few refusals, are
// counted under their own route, kind and code: none falls into "other".
// This catches a route or code added to the broker but not to the metrics'
// known sets.
func TestBrokerAuditRecords(t *testing.T) {
	dir, err := os.MkdirTemp("", "ohdm") // socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	be := brokertest.New()
	b, err := broker.New(broker.Options{
		RuntimeDir: dir,
		Key:        broker.DeriveKey([]byte("master key of the metrics tests, 32+ bytes")),
		Backend:    be,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	conv := broker.Conversation{ID: "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b", UID: os.Getuid(), GID: os.Getgid(), Epoch: 1,
		Grants: broker.Grants{Secrets: []string{"npm-token"}}}
	be.SetConversation(conv)
	be.SetSecret("npm-token", []byte("value"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := b.Open(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	c := broker.NewClient(ep.Socket, ep.TokenFile)
	t.Cleanup(c.Close)

	requests := []struct{ method, path, body string }{
		{"GET", "/v1/whoami", ""},
		{"GET", "/v1/secrets", ""},
		{"GET", "/v1/secrets/npm-token", ""},
		{"GET", "/v1/secrets/not-granted", ""},
		{"POST", "/v1/git-credential?action=get", "protocol=https\nhost=github.com\n\n"},
		{"POST", "/v1/git-credential?action=store", "protocol=https\nhost=github.com\nusername=x\npassword=y\n\n"},
		{"POST", "/v1/git-credential?action=erase", "protocol=https\nhost=github.com\n\n"},
		{"POST", "/v1/git-credential?action=fetch", ""},
		{"GET", "/v1/llm/default", ""},
		{"POST", "/v1/llm/default/proxy/v1/chat/completions", "{}"},
		{"GET", "/v1/oauth/github/token", ""},
		{"POST", "/v1/mcp/linear/proxy", "{}"},
		{"GET", "/v1/no-such-route", ""},
		{"DELETE", "/v1/whoami", ""},
	}
	for _, r := range requests {
		req, err := http.NewRequestWithContext(ctx, r.method, "http://ohd-broker"+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		resp.Body.Close()
	}
	// One refusal before authentication: no token.
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ep.Socket)
	}}}
	t.Cleanup(raw.CloseIdleConnections)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://ohd-broker/v1/whoami", nil)
	req.Header.Set("X-OHD-Request", "1")
	resp, err := raw.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/whoami without a token = %d, want 401", resp.StatusCode)
	}
	recs, err := be.WaitAudit(ctx, len(requests)+1)
	if err != nil {
		t.Fatalf("WaitAudit: %v", err)
	}

	m := metrics.New(metrics.Options{})
	routes := map[string]bool{}
	for _, r := range recs {
		m.BrokerRequest(r.Route, r.Kind, r.Allowed, r.Code)
		routes[r.Route] = true
	}
	if len(routes) < 12 { // eleven patterns and "" (no route)
		t.Errorf("audit records carry routes %v, want every route and none", routes)
	}
	var total float64
	for labels, v := range series(t, m.Registry(), metrics.NameBrokerRequests) {
		total += v
		if v > 0 && strings.Contains(labels, "=other") {
			t.Errorf("series {%s} = %v: a broker route, kind or code is missing from the metrics' known sets", labels, v)
		}
	}
	if int(total) != len(recs) {
		t.Errorf("counted %v requests, want %d (one per audit record)", total, len(recs))
	}
}
