package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
