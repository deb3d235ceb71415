package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// statusAuthFailed is the close code of a failed socket authentication.
const statusAuthFailed websocket.StatusCode = 4001

// firstFrameTimeout is how long a socket without a key in its request
// has to send its auth frame.
const firstFrameTimeout = 10 * time.Second

// acceptSocket authenticates and accepts a WebSocket as every socket of the
// agent server does (reference §7, sockets.py L105-223 @v1.43.1):
//   - no key configured: accepted at once ("none");
//   - a key in the query (session_api_key, which takes precedence) or in
//     the X-Session-API-Key header: a valid one is accepted ("query",
//     "header"); an invalid one is closed with 4001 before the accept,
//     which the handshake answers as HTTP 403;
//   - neither: accepted, then the first text frame must arrive within 10 s
//     and be {"type":"auth","session_api_key":KEY} with a valid key
//     ("frame"); anything else closes 4001 "Authentication failed".
//
// It returns the accepted connection and how it authenticated, or false
// when the socket was refused (and answered).
func (s *Server) acceptSocket(w http.ResponseWriter, r *http.Request) (*websocket.Conn, string, bool) {
	how := "none"
	if len(s.keys) > 0 {
		key, where := r.URL.Query().Get("session_api_key"), "query"
		if key == "" {
			key, where = r.Header.Get("X-Session-API-Key"), "header"
		}
		switch {
		case key == "":
			how = "frame"
		case s.validKey(key):
			how = where
		default:
			w.WriteHeader(http.StatusForbidden)
			return nil, "", false
		}
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The agent server does not check Origin either: authentication
		// is the session key, and a proxy may forward any Origin.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return nil, "", false // Accept has answered the client
	}
	c.SetReadLimit(maxWSMessage)
	if how == "frame" && !s.frameAuth(r.Context(), c) {
		c.Close(statusAuthFailed, "Authentication failed")
		return nil, "", false
	}
	return c, how, true
}

// frameAuth reads the first frame of c and reports whether it is a valid
// auth frame.
func (s *Server) frameAuth(ctx context.Context, c *websocket.Conn) bool {
	ctx, cancel := context.WithTimeout(ctx, firstFrameTimeout)
	defer cancel()
	typ, data, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		return false
	}
	var m struct {
		Type string `json:"type"`
		Key  string `json:"session_api_key"`
	}
	return json.Unmarshal(data, &m) == nil && m.Type == "auth" && m.Key != "" && s.validKey(m.Key)
}
