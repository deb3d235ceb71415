package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// dialWS opens a WebSocket to url, with key in the header unless "".
func dialWS(t *testing.T, url, key string) *websocket.Conn {
	t.Helper()
	c, resp, err := tryDialWS(url, key)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", url, err, code)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func tryDialWS(url, key string) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if key != "" {
		h.Set("X-Session-API-Key", key)
	}
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		c.SetReadLimit(maxWSMessage)
	}
	return c, resp, err
}

func readMsg(t *testing.T, c *websocket.Conn) (websocket.MessageType, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Read(ctx)
}

func readHello(t *testing.T, c *websocket.Conn) helloMessage {
	t.Helper()
	typ, b, err := readMsg(t, c)
	if err != nil || typ != websocket.MessageText {
		t.Fatalf("reading hello: %v %v", typ, err)
	}
	return mustJSON[helloMessage](t, b)
}

func TestWebSocketEcho(t *testing.T) {
	ts := newTestServer(t, Config{})
	conv := ts.create(t, t.TempDir(), "")
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/sockets/events/"

	c := dialWS(t, wsURL+conv.ID, testKey)
	want := helloMessage{Type: "hello", ConversationID: conv.ID, Auth: "header", Kind: "ConversationStateUpdateEvent", Key: "full_state", Value: &conv}
	if diff := cmp.Diff(want, readHello(t, c), cmpopts.IgnoreFields(helloMessage{}, "ID")); diff != "" {
		t.Errorf("hello (-want +got):\n%s", diff)
	}
	ctx := context.Background()
	msgs := []struct {
		typ  websocket.MessageType
		data string
	}{
		{websocket.MessageText, `{"type":"message","text":"hi"}`},
		{websocket.MessageBinary, "\x00\x01binary"},
		{websocket.MessageText, "not json"},
		{websocket.MessageText, strings.Repeat("x", 100000)},
	}
	for _, m := range msgs {
		if err := c.Write(ctx, m.typ, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
		typ, got, err := readMsg(t, c)
		if err != nil || typ != m.typ || string(got) != m.data {
			t.Errorf("echo of %.40q = %v %.40q %v, want the same message", m.data, typ, got, err)
		}
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"close","code":4321,"reason":"asked"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readMsg(t, c); websocket.CloseStatus(err) != 4321 {
		t.Errorf("after a close request, Read error = %v, want close status 4321", err)
	}
}

func TestWebSocketAdmission(t *testing.T) {
	const envID = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	ts := newTestServer(t, Config{ConversationID: envID})
	conv := ts.create(t, t.TempDir(), "")
	base := "ws" + strings.TrimPrefix(ts.URL, "http") + "/sockets/events/"

	tests := []struct {
		name, path, key string
		frame           string               // sent first, after the upgrade
		wantHTTP        int                  // a refused upgrade
		wantClose       websocket.StatusCode // closed right after the upgrade
		wantAuth        string
	}{
		{"created conversation", conv.ID, testKey, "", 0, 0, "header"},
		{"OHD_CONVERSATION_ID before creation", envID, testKey, "", 0, 0, "header"},
		{"key in query", conv.ID + "?session_api_key=" + testKey, "", "", 0, 0, "query"},
		{"unknown id", newUUID(), testKey, "", 0, statusNotFound, ""},
		{"malformed id", "xyz", testKey, "", 0, statusNotFound, ""},
		// Reference §7: a bad key in the request is closed 4001 before
		// the accept, which the handshake answers as 403; the query's key
		// takes precedence over the header's.
		{"wrong key", conv.ID, "wrong", "", 403, 0, ""},
		{"wrong key in query", conv.ID + "?session_api_key=wrong", "", "", 403, 0, ""},
		{"wrong key in query, good header", conv.ID + "?session_api_key=wrong", testKey, "", 403, 0, ""},
		// No key in the request: accepted, then the first frame must
		// authenticate.
		{"no key, auth frame", conv.ID, "", `{"type":"auth","session_api_key":"` + testKey + `"}`, 0, 0, "frame"},
		{"no key, bad auth frame", conv.ID, "", `{"type":"auth","session_api_key":"wrong"}`, 0, statusAuthFailed, ""},
		{"no key, not an auth frame", conv.ID, "", `{"type":"message"}`, 0, statusAuthFailed, ""},
		{"no key, auth frame for an unknown id", newUUID(), "", `{"type":"auth","session_api_key":"` + testKey + `"}`, 0, statusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp, err := tryDialWS(base+tt.path, tt.key)
			if tt.wantHTTP != 0 {
				if err == nil {
					c.CloseNow()
					t.Fatalf("dial %s succeeded, want HTTP %d", tt.path, tt.wantHTTP)
				}
				if resp == nil || resp.StatusCode != tt.wantHTTP {
					t.Fatalf("dial %s: %v, want HTTP %d", tt.path, err, tt.wantHTTP)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial %s: %v", tt.path, err)
			}
			defer c.CloseNow()
			if tt.frame != "" {
				if err := c.Write(t.Context(), websocket.MessageText, []byte(tt.frame)); err != nil {
					t.Fatalf("send the first frame on %s: %v", tt.path, err)
				}
			}
			if tt.wantClose != 0 {
				if _, _, err := readMsg(t, c); websocket.CloseStatus(err) != tt.wantClose {
					t.Fatalf("first Read on %s = %v, want close %d", tt.path, err, tt.wantClose)
				}
				return
			}
			if h := readHello(t, c); h.Auth != tt.wantAuth {
				t.Errorf("hello on %s = %+v, want auth %q", tt.path, h, tt.wantAuth)
			}
		})
	}

	anyID := newTestServer(t, Config{AnyID: true})
	c := dialWS(t, "ws"+strings.TrimPrefix(anyID.URL, "http")+"/sockets/events/"+newUUID(), testKey)
	if h := readHello(t, c); h.Type != "hello" {
		t.Errorf("with STANDIN_ANY_ID, hello = %+v", h)
	}
}

func TestCloseCode(t *testing.T) {
	tests := map[int]websocket.StatusCode{
		1000: 1000, 1001: 1001, 1008: 1008, 1011: 1011, 4001: 4001, 3000: 3000,
		1005: 1000, 1006: 1000, 1015: 1000, 0: 1000, 999: 1000, 5000: 1000, 2000: 1000,
	}
	for in, want := range tests {
		if got := closeCode(in); got != want {
			t.Errorf("closeCode(%d) = %d, want %d", in, got, want)
		}
	}
}
