package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

const testKey = "test-session-key-0123456789"

// testServer is a standin served by httptest, with its log.
type testServer struct {
	*httptest.Server
	srv *Server
	log *testenv.SyncBuffer
}

// newTestServer starts a standin with cfg; a cfg without keys gets testKey.
func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	if cfg.Keys == nil {
		cfg.Keys = []string{testKey}
	}
	if cfg.Addr == "" {
		cfg.Addr = "0.0.0.0:8000"
	}
	if cfg.ConversationsPath == "" {
		cfg.ConversationsPath = t.TempDir()
	}
	if cfg.BashEventsDir == "" {
		cfg.BashEventsDir = filepath.Join(t.TempDir(), "bash_events")
	}
	if cfg.SecretKey == "" && len(cfg.Keys) > 0 {
		cfg.SecretKey = cfg.Keys[0]
	}
	logs := &testenv.SyncBuffer{}
	srv, err := NewServer(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &testServer{Server: hs, srv: srv, log: logs}
}

// do sends a request with the test key and returns the status and body.
func (ts *testServer) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	return ts.doKey(t, method, path, body, testKey)
}

// doKey is do with an explicit key ("" sends none).
func (ts *testServer) doKey(t *testing.T, method, path, body, key string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-Session-API-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// mustJSON decodes b into a new T, failing t if it does not parse.
func mustJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

// create starts a conversation in dir (with id if not "") and returns it.
func (ts *testServer) create(t *testing.T, dir, id string) ConversationInfo {
	t.Helper()
	body := map[string]any{"workspace": map[string]string{"working_dir": dir}}
	if id != "" {
		body["conversation_id"] = id
	}
	b, _ := json.Marshal(body)
	code, out := ts.do(t, "POST", "/api/conversations", string(b))
	if code != http.StatusCreated {
		t.Fatalf("POST /api/conversations = %d %s, want 201", code, out)
	}
	return mustJSON[ConversationInfo](t, out)
}
