package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// sdkSocket is the SDK's RemoteConversation WebSocket (reference §2b):
// /sockets/events/{id} with no header and no query, the key in a first
// {"type":"auth"} frame, then events until the first
// ConversationStateUpdateEvent, its "ready" signal.
func sdkSocket(t *testing.T, d *daemon, id string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/events/"+id, nil)
	if err != nil {
		t.Fatalf("dial the events socket: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	auth, _ := json.Marshal(map[string]string{"type": "auth", "session_api_key": d.apiKey()})
	if err := c.Write(ctx, websocket.MessageText, auth); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the first ConversationStateUpdateEvent: %v\n%s", err, tail(d.logs.String(), 20))
		}
		var ev struct{ Kind string }
		if json.Unmarshal(b, &ev) == nil && ev.Kind == "ConversationStateUpdateEvent" {
			return c
		}
	}
}

// sdkEvents is the SDK's reconciliation over REST: every event's
// llm_message text, oldest first.
func sdkEvents(t *testing.T, d *daemon, id string) []string {
	t.Helper()
	r := d.call("GET", "/api/conversations/"+id+"/events/search", nil)
	var page struct {
		Items []struct {
			LLMMessage struct {
				Content []struct{ Text string }
			} `json:"llm_message"`
		}
	}
	r.json(t, &page)
	var out []string
	for _, it := range page.Items {
		for _, c := range it.LLMMessage.Content {
			out = append(out, c.Text)
		}
	}
	return out
}

// TestBackendSDKRemoteConversation drives the SDK's RemoteConversation wire
// sequence (reference §2b) against ohd and the stand-in, with the
// conversation's container removed in the middle: attach falls through to
// create on 404, a plaintext create, the socket with first-frame auth,
// events, POST .../secrets; then the loss, the socket closing with a code
// the SDK retries, the reconnect, and the same conversation, events and
// secret after it.
func TestBackendSDKRemoteConversation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		id := store.NewID()
		const llmKey = "sk-sdk-plaintext-key-0123456789abcdef"

		// Attach: GET first; 404 falls through to create.
		if r := d.call("GET", "/api/conversations/"+id, nil); r.Status != 404 {
			t.Fatalf("attach GET of a new id = %d %s, want 404", r.Status, r.Body)
		}
		body := map[string]any{
			"agent": map[string]any{"kind": "Agent", "llm": map[string]any{"model": "openai/gpt-test", "api_key": llmKey, "usage_id": "agent"},
				"tools": []any{map[string]any{"name": "terminal"}}},
			"initial_message": nil, "max_iterations": 500, "stuck_detection": true,
			"workspace":             map[string]any{"kind": "LocalWorkspace", "working_dir": repo},
			"tool_module_qualnames": map[string]any{}, "agent_definitions": []any{}, "plugins": nil, "hook_config": nil,
			"client_tools": []any{}, "tags": map[string]any{}, "observability_metadata": map[string]any{},
			"user_id": nil, "conversation_id": id,
		}
		r := d.call("POST", "/api/conversations", body)
		var info struct{ ID string }
		r.json(t, &info)
		// A new conversation is 201; only a retry of an existing one is 200
		// (reference §8).
		if r.Status != 201 || info.ID != id {
			t.Fatalf("create = %d %s, want 201 with id %s", r.Status, r.Body, id)
		}

		ws := sdkSocket(t, d, id)
		if got := sdkEvents(t, d, id); len(got) != 0 {
			t.Errorf("events of a new conversation = %q, want none", got)
		}
		if r := d.call("POST", "/api/conversations/"+id+"/secrets", map[string]any{"secrets": map[string]any{"LLM_KEY": llmKey}}); r.Status != 200 {
			t.Fatalf("POST secrets = %d %s", r.Status, r.Body)
		}
		type secretReport map[string]struct {
			Readable bool   `json:"readable"`
			SHA256   string `json:"sha256"`
		}
		var before secretReport
		d.call("GET", "/api/conversations/"+id+"/standin/secrets", nil).json(t, &before)
		if !before["LLM_KEY"].Readable {
			t.Fatalf("secret report = %+v, want LLM_KEY readable", before)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		msg, _ := json.Marshal(map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "before the loss"}}})
		if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), "before the loss") {
			t.Fatalf("event of the sent message = %s, %v", b, err)
		}

		// The container goes away under the open socket.
		b.kill(t, d.record(id).ContainerID)
		_, _, err := ws.Read(ctx)
		code := websocket.CloseStatus(err)
		if err == nil || code == 4001 || code == 4004 {
			t.Fatalf("socket after the container loss: %v (code %d), want a close the SDK retries (not 4001 or 4004)", err, code)
		}
		waitFor(t, 10*time.Second, "ohd to notice the loss", func() bool { return d.record(id).State == store.StateStopped })

		// The SDK reconnects (and may retry the create: 200, same conversation).
		if r := d.call("POST", "/api/conversations", body); r.Status != 200 || !strings.Contains(string(r.Body), id) {
			t.Errorf("retried create = %d %s, want 200 with the conversation", r.Status, r.Body)
		}
		ws = sdkSocket(t, d, id)
		if err := ws.Write(ctx, websocket.MessageText, []byte(strings.Replace(string(msg), "before", "after", 1))); err != nil {
			t.Fatal(err)
		}
		if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), "after the loss") {
			t.Fatalf("event after the reconnect = %s, %v", b, err)
		}
		if got := sdkEvents(t, d, id); strings.Join(got, "|") != "before the loss|after the loss" {
			t.Errorf("events after the loss = %q, want both messages in order", got)
		}
		var rep secretReport
		d.call("GET", "/api/conversations/"+id+"/standin/secrets", nil).json(t, &rep)
		if !rep["LLM_KEY"].Readable || rep["LLM_KEY"].SHA256 != before["LLM_KEY"].SHA256 {
			t.Errorf("secret after the loss = %+v, want readable, as before (%+v)", rep["LLM_KEY"], before["LLM_KEY"])
		}
		ws.Close(websocket.StatusNormalClosure, "")

		// The plaintext key crossed into the inner server's (encrypted) state
		// only: not into the container's configuration, ohd's record or log.
		out := b.workload(t, d.record(id).ContainerID).Raw
		rec := d.ohctl("--json", "show", id)
		for what, s := range map[string]string{"the engine's record of the container": out, "ohd's record": rec, "ohd's log": d.logs.String()} {
			if strings.Contains(s, llmKey) {
				t.Errorf("%s shows the LLM key", what)
			}
		}
		d.ohctl("rm", "--discard", id)
	})
}
