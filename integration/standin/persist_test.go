package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// exampleKey is the key string of the reference's Fernet worked example
// (§1): a token made under it is what the real server would write.
const exampleKey = "ohd-example-secret-key-0123456789"

// TestPersistsAndReloads checks the standin keeps a conversation in the
// agent server's files (reference §5) and a new server on the same
// directory serves it again: info, events and secrets, which decrypt
// under the same OH_SECRET_KEY and not under another.
func TestPersistsAndReloads(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, Config{ConversationsPath: dir, SecretKey: exampleKey})
	conv := ts.create(t, t.TempDir(), "")
	if code, b := ts.do(t, "POST", "/api/conversations/"+conv.ID+"/secrets", `{"secrets":{"LLM_KEY":"sk-test-123","OTHER":{"value":"v2"}}}`); code != 200 {
		t.Fatalf("POST secrets = %d %s", code, b)
	}
	if code, b := ts.do(t, "POST", "/api/conversations/"+conv.ID+"/events", `{"role":"user","content":[{"type":"text","text":"hello"}]}`); code != 200 {
		t.Fatalf("POST events = %d %s", code, b)
	}
	if code, b := ts.do(t, "POST", "/api/conversations/"+conv.ID+"/pause", ""); code != 200 {
		t.Fatalf("pause = %d %s", code, b)
	}

	hex := strings.ReplaceAll(conv.ID, "-", "")
	var base struct {
		ExecutionStatus string `json:"execution_status"`
		SecretRegistry  struct {
			SecretSources map[string]struct{ Kind, Value string } `json:"secret_sources"`
		} `json:"secret_registry"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, hex, "base_state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &base); err != nil {
		t.Fatal(err)
	}
	tok := base.SecretRegistry.SecretSources["LLM_KEY"].Value
	if base.ExecutionStatus != "paused" || !openhands.IsToken(tok) || strings.Contains(string(raw), "sk-test-123") {
		t.Fatalf("base_state.json = %s, want status paused and LLM_KEY as a Fernet token", raw)
	}
	if pt, err := openhands.NewFernet(exampleKey).Decrypt(tok); err != nil || string(pt) != "sk-test-123" {
		t.Errorf("the persisted token does not decrypt under OH_SECRET_KEY: %q, %v", pt, err)
	}
	if _, err := os.Stat(filepath.Join(dir, hex, "meta.json")); err != nil {
		t.Errorf("no meta.json: %v", err)
	}
	if evs, _ := filepath.Glob(filepath.Join(dir, hex, "events", "event-00000-*.json")); len(evs) != 1 {
		t.Errorf("events on disk = %v, want one event-00000-<id>.json", evs)
	}

	again := newTestServer(t, Config{ConversationsPath: dir, SecretKey: exampleKey})
	code, b := again.do(t, "GET", "/api/conversations/"+conv.ID, "")
	if got := mustJSON[ConversationInfo](t, b); code != 200 || got.ExecutionStatus != "paused" || got.Workspace != conv.Workspace {
		t.Errorf("GET after a restart = %d %s, want the paused conversation", code, b)
	}
	_, b = again.do(t, "GET", "/api/conversations/"+conv.ID+"/events/search", "")
	if !strings.Contains(string(b), `"text":"hello"`) {
		t.Errorf("events after a restart = %s, want the message", b)
	}
	_, b = again.do(t, "GET", "/api/conversations/"+conv.ID+"/standin/secrets", "")
	rep := mustJSON[map[string]secretStatus](t, b)
	if !rep["LLM_KEY"].Readable || rep["LLM_KEY"].SHA256 != sha256Hex([]byte("sk-test-123")) || !rep["OTHER"].Readable {
		t.Errorf("secret report after a restart with the same key = %s, want both readable", b)
	}
	code, b = again.do(t, "POST", "/api/conversations", `{"workspace":{"working_dir":"/"},"conversation_id":"`+conv.ID+`"}`)
	if code != 200 || mustJSON[ConversationInfo](t, b).Workspace != conv.Workspace {
		t.Errorf("create of an existing id = %d %s, want 200 with the existing conversation", code, b)
	}

	// Another key (a fresh session key, as without OH_SECRET_KEY): the
	// server reads the conversation but its secrets are lost.
	other := newTestServer(t, Config{ConversationsPath: dir, Keys: []string{"fresh-session-key"}})
	_, b = other.doKey(t, "GET", "/api/conversations/"+conv.ID+"/standin/secrets", "", "fresh-session-key")
	if rep := mustJSON[map[string]secretStatus](t, b); rep["LLM_KEY"].Readable || !rep["LLM_KEY"].Encrypted {
		t.Errorf("secret report under the session-key fallback = %s, want LLM_KEY unreadable", b)
	}
}

// TestSecretKeyFallback checks where the cipher key comes from (reference
// §1): OH_SECRET_KEY, else SESSION_API_KEY, else OH_SESSION_API_KEYS_0.
func TestSecretKeyFallback(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OH_SECRET_KEY": "a", "SESSION_API_KEY": "b", "OH_SESSION_API_KEYS_0": "c"}, "a"},
		{map[string]string{"SESSION_API_KEY": "b", "OH_SESSION_API_KEYS_0": "c"}, "b"},
		{map[string]string{"OH_SESSION_API_KEYS_0": "c"}, "c"},
		{nil, ""},
	} {
		cfg, err := configFromEnv(env(tt.env))
		if err != nil || cfg.SecretKey != tt.want {
			t.Errorf("configFromEnv(%v).SecretKey = %q, %v, want %q", tt.env, cfg.SecretKey, err, tt.want)
		}
	}
}

// TestSessionSocket checks the v2 socket (reference §7): a sync frame,
// replay after after_seq, live durable frames, 4004 for an unknown id.
func TestSessionSocket(t *testing.T) {
	ts := newTestServer(t, Config{})
	conv := ts.create(t, t.TempDir(), "")
	for _, text := range []string{"one", "two"} {
		ts.do(t, "POST", "/api/conversations/"+conv.ID+"/events", `{"role":"user","content":[{"type":"text","text":"`+text+`"}]}`)
	}
	base := "ws" + strings.TrimPrefix(ts.URL, "http") + "/sockets/session/"
	c := dialWS(t, base+conv.ID+"?after_seq=0", testKey)
	defer c.CloseNow()
	var frames []map[string]any
	for range 2 {
		_, b, err := readMsg(t, c)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, mustJSON[map[string]any](t, b))
	}
	if frames[0]["type"] != "sync" || frames[0]["from_seq"] != 0.0 || frames[0]["through_seq"] != 1.0 {
		t.Errorf("first frame = %v, want sync from 0 through 1", frames[0])
	}
	if frames[1]["type"] != "durable" || frames[1]["seq"] != 1.0 {
		t.Errorf("replay = %v, want durable seq 1 only", frames[1])
	}
	if err := c.Write(context.Background(), websocket.MessageText, []byte(`{"role":"user","content":[{"type":"text","text":"three"}]}`)); err != nil {
		t.Fatal(err)
	}
	_, b, err := readMsg(t, c)
	if f := mustJSON[map[string]any](t, b); err != nil || f["type"] != "durable" || f["seq"] != 2.0 || !strings.Contains(string(b), "three") {
		t.Errorf("live frame = %s, %v, want durable seq 2 with the message", b, err)
	}

	u := dialWS(t, base+newUUID(), testKey)
	defer u.CloseNow()
	if _, _, err := readMsg(t, u); websocket.CloseStatus(err) != statusNotFound {
		t.Errorf("unknown conversation: %v, want close 4004", err)
	}
}

// TestReadsWorkedExampleToken loads a conversation whose secret is the
// reference's worked example token (§1), as the real server would have
// written it under OH_SECRET_KEY "ohd-example-secret-key-0123456789".
func TestReadsWorkedExampleToken(t *testing.T) {
	const token = "gAAAAABpVbkAAAECAwQFBgcICQoLDA0OD6zjGmLFAo7DXoBd17sndK33t3wUpYhsgo4qbedGIYyFxnbwTBxmlRLtWymkeBwcZg=="
	dir := t.TempDir()
	id := newUUID()
	conv := filepath.Join(dir, strings.ReplaceAll(id, "-", ""))
	if err := os.MkdirAll(conv, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"meta.json":       `{"id":"` + id + `","workspace":{"kind":"LocalWorkspace","working_dir":"/w"},"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`,
		"base_state.json": `{"id":"` + id + `","execution_status":"finished","secret_registry":{"secret_sources":{"LLM_KEY":{"kind":"StaticSecret","value":"` + token + `"}}}}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(conv, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ts := newTestServer(t, Config{ConversationsPath: dir, SecretKey: exampleKey})
	_, b := ts.do(t, "GET", "/api/conversations/"+id+"/standin/secrets", "")
	if rep := mustJSON[map[string]secretStatus](t, b); !rep["LLM_KEY"].Readable || rep["LLM_KEY"].SHA256 != sha256Hex([]byte("sk-test-123")) {
		t.Errorf("secret report = %s, want the example token read as sk-test-123", b)
	}
	if _, b := ts.do(t, "GET", "/api/conversations/"+id, ""); mustJSON[ConversationInfo](t, b).ExecutionStatus != "finished" {
		t.Errorf("GET = %s, want execution_status finished", b)
	}
}
