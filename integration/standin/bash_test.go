package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// readBashEvent reads one bash event as a map.
func readBashEvent(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	_, b, err := readMsg(t, c)
	if err != nil {
		t.Fatalf("read bash event: %v", err)
	}
	return mustJSON[map[string]any](t, b)
}

// TestBashEventsSocket: an ExecuteBashRequest gives a BashCommand and a
// BashOutput with the output and exit code, to every subscriber; a bad
// frame a BashError; an auth frame nothing; resend_mode=all replays.
func TestBashEventsSocket(t *testing.T) {
	ts := newTestServer(t, Config{})
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/sockets/bash-events"
	c := dialWS(t, url, testKey)
	watcher := dialWS(t, url, testKey)
	ctx := context.Background()
	// A socket subscribes after its upgrade, so the watcher proves it is
	// reading (and so subscribed) before the command runs: its own bad
	// frame answers a BashError.
	if err := watcher.Write(ctx, websocket.MessageText, []byte(`{"cwd":"/"}`)); err != nil {
		t.Fatal(err)
	}
	if e := readBashEvent(t, watcher); e["kind"] != "BashError" {
		t.Fatalf("the watcher's bad frame gave %v, want a BashError", e)
	}
	for _, frame := range []string{`{"type":"auth","session_api_key":"x"}`, `{"cwd":"/"}`, `{"command":"echo out; echo err >&2; exit 3","cwd":"/"}`} {
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	if e := readBashEvent(t, c); e["kind"] != "BashError" || e["code"] != "ValidationError" {
		t.Errorf("a request without command gave %v, want a BashError", e)
	}
	for _, conn := range []*websocket.Conn{c, watcher} {
		cmd := readBashEvent(t, conn)
		if cmd["kind"] != "BashCommand" || cmd["command"] != "echo out; echo err >&2; exit 3" || cmd["timeout"] != 300.0 || cmd["cwd"] != "/" {
			t.Fatalf("first event = %v, want the BashCommand", cmd)
		}
		out := readBashEvent(t, conn)
		want := map[string]any{"kind": "BashOutput", "command_id": cmd["id"], "order": 0.0, "exit_code": 3.0, "stdout": "out\n", "stderr": "err\n"}
		for k, v := range want {
			if out[k] != v {
				t.Errorf("BashOutput[%s] = %v, want %v (%v)", k, out[k], v, out)
			}
		}
	}
	replay := dialWS(t, url+"?resend_mode=all", testKey)
	if e := readBashEvent(t, replay); e["kind"] != "BashCommand" {
		t.Errorf("resend_mode=all: first event %v, want the earlier BashCommand", e)
	}
	if _, resp, err := tryDialWS(url+"?resend_mode=since", testKey); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Errorf("resend_mode=since: %v, want 403 on the handshake (FastAPI's 1008 before accept)", err)
	}
	b, _ := json.Marshal(map[string]any{"command": "echo $AI_AGENT", "cwd": "/"})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	readBashEvent(t, c)
	if out := readBashEvent(t, c); out["stdout"] != "openhands\n" {
		t.Errorf("AI_AGENT in a bash command = %v, want openhands (sanitized_env)", out["stdout"])
	}
}

// TestBashEventsOnDisk: every bash event is a file in the events directory,
// named as bash_service.py names it, and the HTTP routes read them back.
func TestBashEventsOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "bash_events")
	ts := newTestServer(t, Config{BashEventsDir: dir})
	var out map[string]any
	status := ts.doJSON(t, "POST", "/api/bash/execute_bash_command", `{"command":"echo hi","cwd":"/"}`, &out)
	if status != 200 || out["kind"] != "BashOutput" || out["stdout"] != "hi\n" || out["exit_code"] != 0.0 {
		t.Fatalf("execute_bash_command = %d %v, want 200 and the BashOutput", status, out)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 2 {
		t.Fatalf("the events directory holds %v (%v), want 2 files", ents, err)
	}
	name := regexp.MustCompile(`^\d{20}_(BashCommand|BashOutput_[0-9a-f]{32})_[0-9a-f]{32}$`)
	for _, e := range ents {
		if !name.MatchString(e.Name()) {
			t.Errorf("event file %q is not named <timestamp>_<kind>[_<command>]_<id>", e.Name())
		}
	}
	var page struct {
		Items []map[string]any `json:"items"`
	}
	if status := ts.doJSON(t, "GET", "/api/bash/bash_events/search?kind__eq=BashCommand", "", &page); status != 200 || len(page.Items) != 1 || page.Items[0]["command"] != "echo hi" {
		t.Errorf("search kind__eq=BashCommand = %d %v, want the command", status, page.Items)
	}
	id := strings.ReplaceAll(out["id"].(string), "-", "")
	var one map[string]any
	if status := ts.doJSON(t, "GET", "/api/bash/bash_events/"+id, "", &one); status != 200 || one["id"] != out["id"] {
		t.Errorf("GET bash_events/<hex id> = %d %v, want the output", status, one)
	}
	var cleared map[string]any
	if status := ts.doJSON(t, "DELETE", "/api/bash/bash_events", "", &cleared); status != 200 || cleared["cleared_count"] != 2.0 {
		t.Errorf("DELETE bash_events = %d %v, want cleared_count 2", status, cleared)
	}
}

// TestBashEventsDirUnmakeable: where the events directory cannot be made
// every bash route fails as the real server's: 500 with the OSError, a
// BashError on the socket, nothing run. (Here a file is in the way, which
// stops root too; the image's /workspace owned by 10001 is
// integration.TestInnerBashEvents.)
func TestBashEventsDirUnmakeable(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, Config{BashEventsDir: filepath.Join(parent, "bash_events")})
	ran := filepath.Join(t.TempDir(), "ran")
	for _, path := range []string{"/api/bash/start_bash_command", "/api/bash/execute_bash_command"} {
		var body map[string]any
		status := ts.doJSON(t, "POST", path, `{"command":"touch `+ran+`"}`, &body)
		if ex, _ := body["exception"].(string); status != 500 || body["detail"] != "Internal Server Error" || !strings.HasPrefix(ex, "[Errno 20] Not a directory: ") {
			t.Errorf("%s = %d %v, want 500 with the OSError", path, status, body)
		}
	}
	if status, _ := ts.do(t, "GET", "/api/bash/bash_events/search", ""); status != 500 {
		t.Errorf("search = %d, want 500", status)
	}
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/sockets/bash-events"
	c := dialWS(t, url, testKey)
	if err := c.Write(context.Background(), websocket.MessageText, []byte(`{"command":"touch `+ran+`"}`)); err != nil {
		t.Fatal(err)
	}
	if e := readBashEvent(t, c); e["kind"] != "BashError" || e["code"] != "NotADirectoryError" && e["code"] != "OSError" {
		t.Errorf("a command on the socket gave %v, want a BashError", e)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(ran); err == nil {
		t.Error("a command ran although its event could not be saved")
	}
}

func (ts *testServer) doJSON(t *testing.T, method, path, body string, v any) int {
	t.Helper()
	status, b := ts.do(t, method, path, body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s %s: %d %s: %v", method, path, status, b, err)
	}
	return status
}
