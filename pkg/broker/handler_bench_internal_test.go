package broker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/peercred"
)

// staticBackend answers one conversation from memory and drops audit
// records: the cheapest Backend, so the benchmark measures the broker.
type staticBackend struct{ conv Conversation }

func (s *staticBackend) Conversation(context.Context, string) (Conversation, error) {
	return s.conv, nil
}
func (s *staticBackend) Secret(context.Context, string) ([]byte, error) { return []byte("v"), nil }
func (s *staticBackend) GitCredential(context.Context, string) (GitCredential, error) {
	return GitCredential{}, ErrNotFound
}
func (s *staticBackend) LLMProfile(context.Context, string) (LLMProfile, error) {
	return LLMProfile{}, ErrNotFound
}
func (s *staticBackend) MCPServer(context.Context, string) (MCPServer, error) {
	return MCPServer{}, ErrNotFound
}
func (s *staticBackend) OAuthServer(context.Context, string) (OAuthServer, error) {
	return OAuthServer{}, ErrNotFound
}
func (s *staticBackend) SaveOAuthTokens(context.Context, string, []byte, []byte, time.Time) error {
	return nil
}
func (s *staticBackend) GitBranchCreators(context.Context, string, string, []string) (map[string]string, error) {
	return nil, nil
}
func (s *staticBackend) RecordGitBranches(context.Context, string, string, string, []string) error {
	return nil
}
func (s *staticBackend) Audit(AuditRecord) {}
func (s *staticBackend) AuditErr() error   { return nil }

// BenchmarkServeHTTP measures the handler alone (no sockets): checks,
// backend call, answer, audit.
func BenchmarkServeHTTP(b *testing.B) {
	const id = "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b"
	be := &staticBackend{conv: Conversation{ID: id, UID: os.Geteuid(), Epoch: 1, Grants: Grants{Secrets: []string{"a", "s"}}}}
	br, err := New(Options{RuntimeDir: "/nonexistent", Key: make([]byte, 32), Backend: be,
		Limits: Limits{MaxInFlight: -1, SecretInFlight: -1, GitInFlight: -1, LLMInFlight: -1, OAuthInFlight: -1, Rate: -1}})
	if err != nil {
		b.Fatal(err)
	}
	c := &conversation{b: br, id: id}
	c.lim.init(br.limits)
	for _, path := range []string{"/v1/whoami", "/v1/secrets/s"} {
		b.Run(path, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "http://x"+path, nil)
			req.Header.Set("Authorization", "Bearer "+Token(br.key, id, 1))
			req.Header.Set("X-OHD-Request", "1")
			req = req.WithContext(peercred.WithContext(req.Context(), peercred.Cred{PID: 1, UID: os.Geteuid()}))
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				c.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("%s = %d %s", path, w.Code, w.Body)
				}
			}
		})
	}
}
