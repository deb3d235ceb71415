package broker_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// relayEnv serves a Relay of the conversation conv-l (see llmEnv) over
// plain HTTP, as ohctl inner-exec does on a container's loopback.
func relayEnv(t *testing.T) (*env, *fakeProvider, string) {
	t.Helper()
	e, ep, p := llmEnv(t)
	e.be.SetSecret("conv-l.GITHUB_TOKEN", []byte("ghp_"+marker+"_value"))
	conv := broker.Conversation{
		ID: "conv-l", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{LLM: []string{"openai", "anthropic"}, Secrets: []string{"conv-l.GITHUB_TOKEN"}},
	}
	e.be.SetConversation(conv)
	srv := httptest.NewServer(broker.NewRelay(e.client(ep)))
	t.Cleanup(srv.Close)
	return e, p, srv.URL
}

// relayHTTP sends requests as the inner server's clients do: to the
// relay's address, Host 127.0.0.1:8751, whatever port the test server
// listens on.
var relayHTTP = &http.Client{Transport: relayHostRT{}}

type relayHostRT struct{}

func (relayHostRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = broker.RelayAddr
	return http.DefaultTransport.RoundTrip(r)
}

// TestRelayRefusesForgedRequests: the relay adds the broker token
// itself, so a browser in the container steered to it by DNS rebinding
// (another Host) or by a cross-site page (Origin, Sec-Fetch-*) must be
// refused before the broker is asked: no value, nothing audited. The
// inner server's own requests (Host 127.0.0.1:8751 or localhost:8751, no
// browser headers) pass.
func TestRelayRefusesForgedRequests(t *testing.T) {
	e, _, relay := relayEnv(t)
	get := func(host string, hdr http.Header) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, relay+"/secrets/conv-l.GITHUB_TOKEN", nil)
		req.Host = host
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, host string
		hdr        http.Header
	}{
		{"rebinding host", "attacker.tld:8751", nil},
		{"rebinding host no port", "attacker.tld", nil},
		{"loopback other port", "127.0.0.1:9999", nil},
		{"loopback no port", "127.0.0.1", nil},
		{"origin", broker.RelayAddr, http.Header{"Origin": {"http://attacker.tld"}}},
		{"null origin", broker.RelayAddr, http.Header{"Origin": {"null"}}},
		{"sec-fetch-site", broker.RelayAddr, http.Header{"Sec-Fetch-Site": {"same-origin"}}},
		{"sec-fetch-mode", "localhost:8751", http.Header{"Sec-Fetch-Mode": {"no-cors"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.host, tc.hdr)
			if code != http.StatusForbidden || strings.Contains(body, marker) || !strings.Contains(body, "broker relay") {
				t.Errorf("GET with Host %q %v = %d %q, want 403 saying the relay refused it, without the value", tc.host, tc.hdr, code, body)
			}
		})
	}
	for _, host := range []string{broker.RelayAddr, "localhost:8751"} {
		if code, body := get(host, nil); code != http.StatusOK || body != "ghp_"+marker+"_value" {
			t.Errorf("GET with Host %q = %d %q, want 200 and the value", host, code, body)
		}
	}
	// Only the two allowed requests reached the broker.
	e.audit(2)
	if n := e.auditCount(); n != 2 {
		t.Errorf("%d audit records, want 2: a refused request reached the broker", n)
	}
}

func TestRelayLLMBothHeaderStyles(t *testing.T) {
	_, _, relay := relayEnv(t)
	for _, tc := range []struct {
		name, path string
		hdr        http.Header
		want       string
	}{
		// OpenAI style: the SDK sends its placeholder as a bearer token.
		{"openai", "/llm/openai/v1/chat/completions?x=1", http.Header{"Authorization": {"Bearer ohd-placeholder"}}, `"query":"x=1"`},
		// Anthropic style: the placeholder in x-api-key.
		{"anthropic", "/llm/anthropic/v1/x-api-key", http.Header{"X-Api-Key": {"ohd-placeholder"}, "Anthropic-Version": {"2023-06-01"}}, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, relay+tc.path, strings.NewReader(`{"model":"m"}`))
			req.Header = tc.hdr
			resp, err := relayHTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tc.want) {
				t.Fatalf("POST %s = %d %s, want 200 with %s", tc.path, resp.StatusCode, b, tc.want)
			}
			if strings.Contains(string(b), marker) {
				t.Errorf("the answer holds the key: %s", b)
			}
		})
	}
}

func TestRelayLLMStreamsUnbuffered(t *testing.T) {
	_, p, relay := relayEnv(t)
	resp, err := relayHTTP.Get(relay + "/llm/openai/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: first\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first event did not arrive while the stream was open: the relay buffers")
	}
	close(p.release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "[DONE]") || strings.Contains(string(rest), marker) {
		t.Errorf("rest of the stream = %q", rest)
	}
}

func TestRelayLLMProviderErrorIntact(t *testing.T) {
	_, _, relay := relayEnv(t)
	resp, err := relayHTTP.Get(relay + "/llm/openai/v1/error")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "invalid api key") || strings.Contains(string(b), marker) {
		t.Errorf("provider error through the relay = %d %s, want 401 with the provider's message, key masked", resp.StatusCode, b)
	}
}

func TestRelaySecretRawValueAuditedAndRevocable(t *testing.T) {
	e, _, relay := relayEnv(t)
	get := func() (int, string) {
		resp, err := relayHTTP.Get(relay + "/secrets/conv-l.GITHUB_TOKEN")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusOK || body != "ghp_"+marker+"_value" {
		t.Fatalf("GET /secrets/... = %d %q, want 200 and the raw value", code, body)
	}
	rec := e.audit(1)
	if rec.Kind != "secret" || rec.Name != "conv-l.GITHUB_TOKEN" || !rec.Allowed {
		t.Errorf("audit = %+v, want an allowed secret use by name", rec)
	}
	e.be.SetConversation(broker.Conversation{ID: "conv-l", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{LLM: []string{"openai"}}})
	if code, body := get(); code != http.StatusForbidden || strings.Contains(body, marker) {
		t.Errorf("after revoke: GET = %d %q, want 403 without the value", code, body)
	}
}

// TestRelayAgentCannotReachOtherNames: the agent in the container can
// call the relay, but only with its own conversation's token: another
// conversation's secret or profile, and a path that tries to leave the
// secrets route, are refused without a value.
func TestRelayAgentCannotReachOtherNames(t *testing.T) {
	e, _, relay := relayEnv(t)
	e.be.SetSecret("conv-other.GITHUB_TOKEN", []byte("other-"+marker))
	for _, path := range []string{
		"/secrets/conv-other.GITHUB_TOKEN",
		"/secrets/..%2Fwhoami",
		"/llm/ungranted/v1/chat/completions",
		"/v1/secrets/conv-l.GITHUB_TOKEN",
	} {
		resp, err := relayHTTP.Get(relay + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || strings.Contains(string(b), marker) {
			t.Errorf("GET %s = %d %s, want a refusal without a value", path, resp.StatusCode, b)
		}
	}
}
