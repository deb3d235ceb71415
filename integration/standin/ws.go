package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
)

// maxWSMessage bounds one WebSocket message.
const maxWSMessage = 4 << 20

// statusNotFound is the agent server's close code for an unknown
// conversation (reference §7).
const statusNotFound websocket.StatusCode = 4004

// helloMessage is the first message on /sockets/events/{id}: the agent
// server's ConversationStateUpdateEvent with the full state (the SDK's
// "ready" signal, reference §2b), carrying the standin's own hello fields
// (type, conversation_id, auth) so a test sees how it was reached.
type helloMessage struct {
	Type           string            `json:"type"`
	ConversationID string            `json:"conversation_id"`
	Auth           string            `json:"auth"`
	Kind           string            `json:"kind"`
	ID             string            `json:"id"`
	Key            string            `json:"key"`
	Value          *ConversationInfo `json:"value,omitempty"`
}

// controlMessage is a text message the standin acts on instead of echoing.
type controlMessage struct {
	Type   string `json:"type"`
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// events is the WebSocket echo server on /sockets/events/{id}.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	c, how, ok := s.acceptSocket(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()

	raw := r.PathValue("id")
	id, err := parseUUID(raw)
	if err != nil || !s.knownConversation(id) {
		// sockets.py: accepted and authenticated, then 4004 (reference §7,
		// §8); the SDK treats 4004 as fatal.
		c.Close(statusNotFound, "Conversation not found")
		return
	}
	// Subscribed before the state is sent, as subscribe_to_events does
	// (event_service.py L813-842): an event published once the client has
	// the hello is never missed.
	live := make(chan json.RawMessage, 64)
	s.convs.eventsAndSubscribe(id, live)
	defer s.convs.unsubscribe(id, live)
	hm := helloMessage{Type: "hello", ConversationID: id, Auth: how, Kind: "ConversationStateUpdateEvent", ID: newUUID(), Key: "full_state"}
	if info, ok := s.convs.get(id); ok {
		hm.Value = &info
	}
	hello, _ := json.Marshal(hm)
	if err := c.Write(ctx, websocket.MessageText, hello); err != nil {
		return
	}
	ctx, stop := pumpLive(ctx, live, func(ctx context.Context, ev json.RawMessage) error {
		return c.Write(ctx, websocket.MessageText, ev)
	})
	defer stop()
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
			// A Message frame is sent to the conversation (reference §7):
			// persisted as an event, which reaches subscribers live.
			var m inboundMessage
			if json.Unmarshal(msg, &m) == nil && m.Role != "" {
				if _, _, _, err := s.addMessage(id, m); err != nil {
					s.log.Error("persist event", "conversation_id", id, "err", err)
				}
				continue
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

// session is the v2 socket /sockets/session/{id} (reference §7,
// session_socket.py): a sync frame {"type":"sync","from_seq"?,"through_seq"?},
// the replay of events after ?after_seq= (-1: all; omitted: none) as
// {"type":"durable","seq","event"}, then live durable frames. Inbound
// Message frames are sent to the conversation. Unknown conversation: 4004.
func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	after, hasAfter := -2, false
	if v := r.URL.Query().Get("after_seq"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			writeValidation(w, validationError{Type: "int_parsing", Loc: []any{"query", "after_seq"}, Msg: "Input should be a valid integer", Input: v})
			return
		}
		after, hasAfter = n, true
	}
	c, _, ok := s.acceptSocket(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	id, err := parseUUID(r.PathValue("id"))
	if err != nil {
		c.Close(statusNotFound, "Conversation not found")
		return
	}
	live := make(chan json.RawMessage, 64)
	evs, found := s.convs.eventsAndSubscribe(id, live)
	if !found {
		c.Close(statusNotFound, "Conversation not found")
		return
	}
	defer s.convs.unsubscribe(id, live)
	sync := map[string]any{"type": "sync"}
	if hasAfter {
		sync["from_seq"] = after
	}
	if len(evs) > 0 {
		sync["through_seq"] = len(evs) - 1
	}
	write := func(v any) error {
		b, _ := json.Marshal(v)
		return c.Write(ctx, websocket.MessageText, b)
	}
	if write(sync) != nil {
		return
	}
	seq := len(evs)
	if hasAfter {
		for i := max(after+1, 0); i < len(evs); i++ {
			if write(map[string]any{"type": "durable", "seq": i, "event": evs[i]}) != nil {
				return
			}
		}
	}
	ctx, stop := pumpLive(ctx, live, func(_ context.Context, ev json.RawMessage) error {
		err := write(map[string]any{"type": "durable", "seq": seq, "event": ev})
		seq++
		return err
	})
	defer stop()
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m inboundMessage
		if json.Unmarshal(msg, &m) != nil || m.Role == "" {
			_ = write(map[string]any{"type": "error", "code": "invalid_message", "detail": "expected a Message"})
			continue
		}
		if _, _, _, err := s.addMessage(id, m); err != nil {
			s.log.Error("persist event", "conversation_id", id, "err", err)
		}
	}
}

// pumpLive sends every frame from live with send, on a goroutine of its
// own, until send fails or the returned context (derived from ctx) ends;
// stop ends it and waits for it.
func pumpLive[T any](ctx context.Context, live <-chan T, send func(context.Context, T) error) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case ev := <-live:
				if send(ctx, ev) != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() { cancel(); <-done }
}
