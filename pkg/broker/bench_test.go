package broker_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
)

// newBenchBroker opens one conversation with a few grants and limits out
// of reach, and returns its endpoint and token.
func newBenchBroker(b *testing.B) (broker.Endpoint, string) {
	b.Helper()
	return newBenchBrokerGit(b, "")
}

const benchConvID = "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b"

// newBenchBrokerGit is newBenchBroker with, if gitHost is not empty, a
// grant of that git host reached over plain HTTP.
func newBenchBrokerGit(b *testing.B, gitHost string) (broker.Endpoint, string) {
	b.Helper()
	be := brokertest.New()
	be.DiscardAudit()
	dir, err := os.MkdirTemp("", "ohdb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	key := broker.DeriveKey([]byte("bench"))
	br, err := broker.New(broker.Options{RuntimeDir: dir, Key: key, Backend: be,
		Limits: broker.Limits{MaxInFlight: 4096, SecretInFlight: 4096, GitInFlight: 4096, LLMInFlight: 4096, OAuthInFlight: 4096, MaxConns: -1, Rate: 1e12, Burst: 1 << 30}})
	if err != nil {
		b.Fatal(err)
	}
	conv := broker.Conversation{ID: benchConvID, UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Secrets: []string{"a", "s"}, Git: []string{"github.com/acme"}, LLM: []string{"default"}}}
	be.SetConversation(conv)
	be.SetSecret("s", []byte("value"))
	be.SetGitCredential("github.com", broker.GitCredential{Username: "bot", Password: []byte("pw")})
	if gitHost != "" {
		conv.Grants.Git = append(conv.Grants.Git, gitHost)
		be.SetConversation(conv)
		be.SetGitCredential(gitHost, broker.GitCredential{Username: "bot", Password: []byte("pw"), Scheme: "http"})
	}
	ep, err := br.Open(context.Background(), conv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Shutdown(context.Background()) })
	return ep, broker.Token(key, conv.ID, 1)
}

func benchRequests(b *testing.B, keepAlive bool, method, path, body string) {
	ep, tok := newBenchBroker(b)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", ep.Socket)
		},
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 64,
	}
	hc := &http.Client{Transport: tr}
	b.Cleanup(tr.CloseIdleConnections)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body)
			}
			req, _ := http.NewRequest(method, "http://ohd-broker"+path, rd)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("X-OHD-Request", "1")
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("%s %s = %d", method, path, resp.StatusCode)
			}
		}
	})
}

func BenchmarkWhoami(b *testing.B)        { benchRequests(b, true, "GET", "/v1/whoami", "") }
func BenchmarkWhoamiNewConn(b *testing.B) { benchRequests(b, false, "GET", "/v1/whoami", "") }
func BenchmarkSecret(b *testing.B)        { benchRequests(b, true, "GET", "/v1/secrets/s", "") }
func BenchmarkGitCredential(b *testing.B) {
	benchRequests(b, true, "POST", "/v1/git-credential?action=get", "protocol=https\nhost=github.com\npath=acme/x.git\n")
}

// BenchmarkBaseline is BenchmarkWhoami's yardstick: a plain net/http
// server on a Unix socket answering a constant body, same client.
func BenchmarkBaseline(b *testing.B) {
	dir := b.TempDir()
	sock := dir + "/b.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"id":"0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b","epoch":1,"uid":0,"gid":0,"grants":{"secrets":["a","s"],"git":["github.com/acme"],"llm":["default"],"oauth":[],"mcp":[]}}` + "\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close(); <-done })
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 64,
	}
	hc := &http.Client{Transport: tr}
	b.Cleanup(tr.CloseIdleConnections)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", "http://ohd-broker/v1/whoami", nil)
			req.Header.Set("Authorization", "Bearer x")
			req.Header.Set("X-OHD-Request", "1")
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
