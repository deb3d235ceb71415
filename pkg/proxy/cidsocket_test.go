package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialBash dials /sockets/bash-events with query and hdr, and returns the
// connection or the handshake's answer.
func (p *testProxy) dialBash(t testing.TB, query string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+p.host+"/sockets/bash-events?"+query, &websocket.DialOptions{HTTPHeader: hdr})
	if err == nil {
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

// runBash sends an ExecuteBashRequest and returns the stdout of its
// BashOutput (the stand-in's bash socket, reference §7). Every subscriber
// sees every command: the command's own events are picked by its id.
func runBash(t testing.TB, c *websocket.Conn, command string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"command": command, "cwd": "/"})
	write(t, c, websocket.MessageText, b)
	cmdID := ""
	for {
		_, msg, err := read(t, c)
		if err != nil {
			t.Fatalf("reading bash events: %v", err)
		}
		var ev struct {
			Kind      string  `json:"kind"`
			ID        string  `json:"id"`
			Command   string  `json:"command"`
			CommandID string  `json:"command_id"`
			Stdout    *string `json:"stdout"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil || ev.Kind == "" || ev.Kind == "BashError" {
			t.Fatalf("bash event %s, want BashCommand and BashOutput events", msg)
		}
		switch {
		case ev.Kind == "BashCommand" && ev.Command == command && cmdID == "":
			cmdID = ev.ID
		case ev.Kind == "BashOutput" && cmdID != "" && ev.CommandID == cmdID && ev.Stdout != nil:
			return *ev.Stdout
		}
	}
}

// TestCIDBashSocketGoesToTheConversation: the agent server's global bash
// socket with ?cid= reaches that conversation's inner server, with and
// without an upstream, authenticated by header, query or first message;
// without cid it is the upstream's.
func TestCIDBashSocketGoesToTheConversation(t *testing.T) {
	for _, withUp := range []bool{true, false} {
		name := "without upstream"
		if withUp {
			name = "with upstream"
		}
		t.Run(name, func(t *testing.T) {
			fake := newFake(t)
			var up *fakeUpstream
			var mutate func(*Options)
			if withUp {
				up = newFakeUpstream(t)
				mutate = withUpstream(up.srv.URL, nil)
			}
			p := startProxy(t, fake, mutate)
			id := p.create(t, nil)

			c, resp, err := p.dialBash(t, "cid="+strings.ToUpper(id), keyHeader(outerKeys[0]))
			if err != nil {
				t.Fatalf("dial ?cid= by header: %v (%v)", err, resp)
			}
			// The stand-in runs the command in the conversation's server,
			// whose environment names it.
			if got := runBash(t, c, "echo $OHD_CONVERSATION_ID"); got != id+"\n" {
				t.Errorf("a command on /sockets/bash-events?cid= printed %q, want the conversation's id (its own server)", got)
			}

			first, resp, err := p.dialBash(t, "resend_mode=all&cid="+id, nil)
			if err != nil {
				t.Fatalf("dial ?cid= without a key: %v (%v)", err, resp)
			}
			write(t, first, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"`+outerKeys[1]+`"}`))
			if got := runBash(t, first, "echo again"); got != "again\n" {
				t.Errorf("after first-message auth: %q", got)
			}
			query, resp, err := p.dialBash(t, "session_api_key="+outerKeys[2]+"&cid="+id, nil)
			if err != nil {
				t.Fatalf("dial ?cid= with the key in the query: %v (%v)", err, resp)
			}
			if got := runBash(t, query, "echo q"); got != "q\n" {
				t.Errorf("query auth: %q", got)
			}

			if withUp {
				up.mu.Lock()
				for _, r := range up.reqs {
					if r.URL.Path == "/sockets/bash-events" {
						t.Errorf("the upstream got %s: a ?cid= socket must not reach it", r.URL.RequestURI())
					}
				}
				up.mu.Unlock()
				plain, resp, err := p.dialBash(t, "resend_mode=all", keyHeader(outerKeys[0]))
				if err != nil {
					t.Fatalf("dial without cid: %v (%v)", err, resp)
				}
				write(t, plain, websocket.MessageText, []byte(`{"command":"ls"}`))
				if _, b, err := read(t, plain); err != nil || string(b) != `echo:{"command":"ls"}` {
					t.Errorf("without cid: %q %v, want the upstream's echo", b, err)
				}
			} else if _, resp, err := p.dialBash(t, "resend_mode=all", keyHeader(outerKeys[0])); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
				t.Errorf("without cid and without upstream: %v (%v), want 404 naming --upstream", err, resp)
			}
		})
	}
}

// TestCIDSocketRefusals: a bad key is refused before the upgrade, a
// malformed cid with the validation error, an unknown conversation with
// 4004 once authenticated; the inner server gets the query without cid
// and the client's key, and the inner key.
func TestCIDSocketRefusals(t *testing.T) {
	inner := newWSInner(t)
	fake := newFake(t)
	id := fake.addCustom(inner.addr, inner.key)
	p := startProxy(t, fake, nil)

	if _, resp, err := p.dialBash(t, "cid="+id+"&session_api_key="+wrongKey, nil); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("bad key in the query: %v (%v), want 403 before the upgrade", err, resp)
	}
	if _, resp, err := p.dialBash(t, "cid="+id, keyHeader(wrongKey)); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("bad key in the header: %v (%v), want 403 before the upgrade", err, resp)
	}
	_, resp, err := p.dialBash(t, "cid=not-a-uuid", keyHeader(outerKeys[0]))
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("malformed cid: %v (%v), want 422", err, resp)
	}
	var body struct {
		Detail []validationError `json:"detail"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Detail) != 1 || body.Detail[0].Type != "uuid_parsing" || body.Detail[0].Loc[1] != "cid" {
		t.Errorf("malformed cid body = %+v, want the uuid_parsing error on query.cid", body)
	}

	unknown, resp, err := p.dialBash(t, "cid=3f1d1c7e-8a53-4c1e-9c7e-2b6a4f0e9d11", keyHeader(outerKeys[0]))
	if err != nil {
		t.Fatalf("unknown conversation: %v (%v), want an upgrade and then 4004", err, resp)
	}
	expectClose(t, unknown, CloseUnknownConversation)
	// Unauthenticated, an unknown conversation is not told apart from a
	// known one: the first message decides first.
	anon, _, err := p.dialBash(t, "cid=3f1d1c7e-8a53-4c1e-9c7e-2b6a4f0e9d11", nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, anon, websocket.MessageText, []byte(`{"type":"auth","session_api_key":"`+wrongKey+`"}`))
	expectClose(t, anon, CloseAuthFailed)

	c, resp, err := p.dialBash(t, "resend_mode=all&cid="+id+"&session_api_key="+outerKeys[0], nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	write(t, c, websocket.MessageText, []byte(`{"command":"true"}`))
	if _, b, err := read(t, c); err != nil || string(b) != `{"command":"true"}` {
		t.Fatalf("echo = %q %v", b, err)
	}
	q, h := inner.last()
	if q != "resend_mode=all" || h.Get("X-Session-API-Key") != string(inner.key) {
		t.Errorf("inner got query %q key %q, want resend_mode=all and the inner key", q, h.Get("X-Session-API-Key"))
	}
}
