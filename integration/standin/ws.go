package main

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/coder/websocket"
)

// maxWSMessage bounds one WebSocket message.
const maxWSMessage = 4 << 20

// helloMessage is the first message on /sockets/events/{id}.
type helloMessage struct {
	Type           string `json:"type"`
	ConversationID string `json:"conversation_id"`
	Auth           string `json:"auth"`
}

// controlMessage is a text message the standin acts on instead of echoing.
type controlMessage struct {
	Type   string `json:"type"`
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// events is the WebSocket echo server on /sockets/events/{id}.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	// ServeHTTP has checked the key already; ask again to learn where it was.
	how, ok := s.authenticate(r, true)
	if !ok {
		writeDetail(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The agent server does not check Origin either: authentication
		// is the session key, and a proxy may forward any Origin.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept has answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(maxWSMessage)
	ctx := r.Context()

	raw := r.PathValue("id")
	id, err := parseUUID(raw)
	if err != nil || !s.knownConversation(id) {
		c.Close(websocket.StatusPolicyViolation, "conversation not found")
		return
	}
	hello, _ := json.Marshal(helloMessage{Type: "hello", ConversationID: id, Auth: how})
	if err := c.Write(ctx, websocket.MessageText, hello); err != nil {
		return
	}
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == -1 && !errors.Is(err, ctx.Err()) {
				s.log.Info("websocket read", "conversation_id", id, "err", err)
			}
			return
		}
		if typ == websocket.MessageText {
			var ctl controlMessage
			if json.Unmarshal(msg, &ctl) == nil && ctl.Type == "close" {
				c.Close(closeCode(ctl.Code), ctl.Reason)
				return
			}
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// closeCode returns code if a peer may send it in a close frame, else
// 1000 (normal closure).
func closeCode(code int) websocket.StatusCode {
	switch {
	case code == 1000, code >= 1001 && code <= 1003, code >= 1007 && code <= 1014, code >= 3000 && code <= 4999:
		return websocket.StatusCode(code)
	default:
		return websocket.StatusNormalClosure
	}
}
