package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The agent server's global bash socket, WS /sockets/bash-events
// (reference §7, sockets.py L386-479 @v1.43.1; bash_service.py; the event
// models in models.py L576-629). It is one socket for the whole server,
// not a conversation's:
//
//   - query resend_mode: only "all" (replay every earlier bash event
//     first); any other value fails FastAPI's validation, which on a
//     WebSocket closes with 1008 before the accept, i.e. 403 on the
//     handshake; resend_all=true is the deprecated spelling;
//   - at most 50 subscribers (PubSub max_subscribers=50): one more is
//     accepted and closed 1013 "Too many bash event connections";
//   - inbound ExecuteBashRequest {"command": str, "cwd"?: str|null,
//     "timeout": int (default 300)} starts the command with /bin/sh (asyncio
//     create_subprocess_shell) in its own session, environment the server's
//     minus SESSION_API_KEY plus AI_AGENT=openhands (sanitized_env);
//     auth control frames ({"type":"auth"[,"session_api_key"]}) are
//     ignored; anything else is answered with a BashError;
//   - outbound, to every subscriber, each event's model_dump(mode="json"):
//     {"kind":"BashCommand","id","timestamp","command","cwd","timeout"},
//     then one BashOutput {"kind":"BashOutput","id","timestamp","command_id",
//     "order","exit_code","stdout","stderr"} with the output (null when
//     empty; more than 1 MiB of one stream is cut into earlier chunks, each
//     its own BashOutput with exit_code null) and the exit code, -1 on a
//     timeout. The command outlives the socket that started it.
//
// The events are kept in memory, not in bash_events_dir: nothing in ohd
// reads that directory.

// maxBashSubscribers is the PubSub limit of BashEventService.
const maxBashSubscribers = 50

// maxBashChunk is MAX_CONTENT_CHAR_LENGTH: a stream's output is cut into
// BashOutput events of at most this many characters.
const maxBashChunk = 1 << 20

// bashEvents is the server's bash event service.
type bashEvents struct {
	mu     sync.Mutex
	events [][]byte
	subs   map[chan []byte]struct{}
}

// subscribe registers ch and returns the events so far, or false at the
// subscriber limit.
func (b *bashEvents) subscribe(ch chan []byte) ([][]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) >= maxBashSubscribers {
		return nil, false
	}
	if b.subs == nil {
		b.subs = map[chan []byte]struct{}{}
	}
	b.subs[ch] = struct{}{}
	return append([][]byte(nil), b.events...), true
}

func (b *bashEvents) unsubscribe(ch chan []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, ch)
}

// publish keeps an event and sends it to every subscriber; one that does
// not keep up loses it rather than stall the command.
func (b *bashEvents) publish(v any) {
	ev, _ := json.Marshal(v)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, ev)
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// bashTime is how the events' timestamps are dumped.
func bashTime() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z") }

type bashCommand struct {
	Kind      string  `json:"kind"`
	ID        string  `json:"id"`
	Timestamp string  `json:"timestamp"`
	Command   string  `json:"command"`
	Cwd       *string `json:"cwd"`
	Timeout   int     `json:"timeout"`
}

type bashOutput struct {
	Kind      string  `json:"kind"`
	ID        string  `json:"id"`
	Timestamp string  `json:"timestamp"`
	CommandID string  `json:"command_id"`
	Order     int     `json:"order"`
	ExitCode  *int    `json:"exit_code"`
	Stdout    *string `json:"stdout"`
	Stderr    *string `json:"stderr"`
}

type bashError struct {
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Code      string `json:"code"`
	Detail    string `json:"detail"`
}

func newBashError(code, detail string) bashError {
	return bashError{Kind: "BashError", ID: newUUID(), Timestamp: bashTime(), Code: code, Detail: detail}
}

// bashSocket serves WS /sockets/bash-events.
func (s *Server) bashSocket(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	resend := q.Get("resend_mode")
	if q.Has("resend_mode") && resend != "all" {
		writeDetail(w, http.StatusForbidden, "resend_mode: Input should be 'all'")
		return
	}
	if resend == "" && q.Get("resend_all") == "true" {
		resend = "all"
	}
	c, _, ok := s.acceptSocket(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	live := make(chan []byte, 256)
	past, ok := s.bash.subscribe(live)
	if !ok {
		c.Close(websocket.StatusTryAgainLater, "Too many bash event connections")
		return
	}
	defer s.bash.unsubscribe(live)
	if resend == "all" {
		for _, ev := range past {
			if c.Write(ctx, websocket.MessageText, ev) != nil {
				return
			}
		}
	}
	ctx, stop := pumpLive(ctx, live, func(ctx context.Context, ev []byte) error {
		return c.Write(ctx, websocket.MessageText, ev)
	})
	defer stop()
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(msg, &m) != nil || m == nil {
			// receive_json raises; the handler answers a BashError.
			ev, _ := json.Marshal(newBashError("JSONDecodeError", "expected a JSON object"))
			if c.Write(ctx, websocket.MessageText, ev) != nil {
				return
			}
			continue
		}
		if isAuthControl(m) {
			continue
		}
		req, err := parseBashRequest(m)
		if err != nil {
			ev, _ := json.Marshal(newBashError("ValidationError", err.Error()))
			if c.Write(ctx, websocket.MessageText, ev) != nil {
				return
			}
			continue
		}
		s.startBash(req)
	}
}

// isAuthControl is sockets.py's _is_auth_control_message: {"type":"auth"}
// with at most a session_api_key besides.
func isAuthControl(m map[string]json.RawMessage) bool {
	var typ string
	if json.Unmarshal(m["type"], &typ) != nil || typ != "auth" {
		return false
	}
	for k := range m {
		if k != "type" && k != "session_api_key" {
			return false
		}
	}
	return true
}

type validationFailure string

func (v validationFailure) Error() string { return string(v) }

// parseBashRequest validates an ExecuteBashRequest.
func parseBashRequest(m map[string]json.RawMessage) (bashCommand, error) {
	cmd := bashCommand{Kind: "BashCommand", ID: newUUID(), Timestamp: bashTime(), Timeout: 300}
	if json.Unmarshal(m["command"], &cmd.Command) != nil {
		return cmd, validationFailure("command: Field required (a string)")
	}
	if raw, ok := m["cwd"]; ok && string(raw) != "null" {
		var cwd string
		if json.Unmarshal(raw, &cwd) != nil {
			return cmd, validationFailure("cwd: Input should be a valid string")
		}
		cmd.Cwd = &cwd
	}
	if raw, ok := m["timeout"]; ok {
		if json.Unmarshal(raw, &cmd.Timeout) != nil {
			return cmd, validationFailure("timeout: Input should be a valid integer")
		}
	}
	return cmd, nil
}

// startBash publishes the command and runs it in the background; its
// output is published when it ends.
func (s *Server) startBash(cmd bashCommand) {
	s.bash.publish(cmd)
	if !s.track.add() {
		return
	}
	go func() {
		defer s.track.done()
		cwd := ""
		if cmd.Cwd != nil {
			cwd = *cmd.Cwd
		}
		env := map[string]string{}
		if strings.TrimSpace(os.Getenv("AI_AGENT")) == "" {
			env["AI_AGENT"] = "openhands"
		}
		res := runCommandEnv(s.bg, []string{shellPath, "-c", cmd.Command}, cwd, env, []string{"SESSION_API_KEY"}, "", time.Duration(cmd.Timeout)*time.Second)
		order := 0
		chunks := func(out string, stderr bool) string {
			for len(out) > maxBashChunk {
				chunk := out[:maxBashChunk]
				ev := bashOutput{Kind: "BashOutput", ID: newUUID(), Timestamp: bashTime(), CommandID: cmd.ID, Order: order}
				if stderr {
					ev.Stderr = &chunk
				} else {
					ev.Stdout = &chunk
				}
				s.bash.publish(ev)
				order++
				out = out[maxBashChunk:]
			}
			return out
		}
		stdout, stderr := chunks(res.Stdout, false), chunks(res.Stderr, true)
		code := res.ExitCode
		if res.TimedOut {
			code = -1
		}
		final := bashOutput{Kind: "BashOutput", ID: newUUID(), Timestamp: bashTime(), CommandID: cmd.ID, Order: order, ExitCode: &code}
		if stdout != "" {
			final.Stdout = &stdout
		}
		if stderr != "" {
			final.Stderr = &stderr
		}
		s.bash.publish(final)
	}()
}
