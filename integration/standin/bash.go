package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
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
// The events are files in bash_events_dir, as bash_service.py keeps them
// (L54-91, L178-240 @v1.43.1): OH_BASH_EVENTS_DIR, default the relative
// workspace/bash_events (config.py L272-276), i.e. /workspace/bash_events
// from the image's WORKDIR /, which only uid 10001 may create. Each event is
// one file <YYYYMMDDHHMMSSffffff>_<kind>[_<command_id hex>]_<id hex> holding
// its JSON (indent 2); the directory is made (parents too) before every
// write and scan, and a replay reads them back in name order. When the
// directory cannot be made every route that touches it fails as the real
// server's do: the HTTP routes answer 500 {"detail":"Internal Server
// Error","exception":"[Errno 13] Permission denied: '...'","error_id"}
// (api.py L579-636), a command sent on the socket a BashError with code
// PermissionError (sockets.py L458-466), and a replay closes the socket
// 1011 (the exception escapes the handler).

// maxBashSubscribers is the PubSub limit of BashEventService.
const maxBashSubscribers = 50

// maxBashChunk is MAX_CONTENT_CHAR_LENGTH: a stream's output is cut into
// BashOutput events of at most this many characters.
const maxBashChunk = 1 << 20

// bashEvents is the server's bash event service.
type bashEvents struct {
	// dir is bash_events_dir.
	dir  string
	mu   sync.Mutex
	subs map[chan []byte]struct{}
}

// subscribe registers ch, or returns false at the subscriber limit.
func (b *bashEvents) subscribe(ch chan []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) >= maxBashSubscribers {
		return false
	}
	if b.subs == nil {
		b.subs = map[chan []byte]struct{}{}
	}
	b.subs[ch] = struct{}{}
	return true
}

func (b *bashEvents) unsubscribe(ch chan []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, ch)
}

// pyOSError is how Python words an OSError on path, "[Errno 13]
// Permission denied: 'workspace/bash_events'", with its class name.
type pyOSError struct {
	class, msg string
}

func (e pyOSError) Error() string { return e.msg }

func asPyOSError(err error) error {
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return pyOSError{"OSError", err.Error()}
	}
	class, text := "OSError", pe.Err.Error()
	var no syscall.Errno
	if errors.As(pe.Err, &no) {
		switch no {
		case syscall.EACCES, syscall.EPERM:
			class, text = "PermissionError", "Permission denied"
		case syscall.ENOENT:
			class, text = "FileNotFoundError", "No such file or directory"
		case syscall.ENOTDIR:
			class, text = "NotADirectoryError", "Not a directory"
		case syscall.EROFS:
			text = "Read-only file system"
		}
		return pyOSError{class, fmt.Sprintf("[Errno %d] %s: '%s'", int(no), text, pe.Path)}
	}
	return pyOSError{class, pe.Error()}
}

// ensure is _ensure_bash_events_dir: mkdir(parents=True, exist_ok=True).
func (b *bashEvents) ensure() error {
	if err := os.MkdirAll(b.dir, 0o777); err != nil {
		return asPyOSError(err)
	}
	return nil
}

// fileName is _get_event_filename.
func bashFileName(ts time.Time, kind, commandID, id string) string {
	parts := []string{ts.UTC().Format("20060102150405.000000"), kind}
	parts[0] = strings.Replace(parts[0], ".", "", 1)
	if commandID != "" {
		parts = append(parts, strings.ReplaceAll(commandID, "-", ""))
	}
	return strings.Join(append(parts, strings.ReplaceAll(id, "-", "")), "_")
}

// publish is _save_event_to_file then the PubSub: the event is written to
// its file first (an error there is the caller's), then sent to every
// subscriber; one that does not keep up loses it rather than stall the
// command.
func (b *bashEvents) publish(ts time.Time, kind, commandID, id string, v any) error {
	if err := b.ensure(); err != nil {
		return err
	}
	file, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(filepath.Join(b.dir, bashFileName(ts, kind, commandID, id)), file, 0o666); err != nil {
		return asPyOSError(err)
	}
	ev, _ := json.Marshal(v)
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
		}
	}
	return nil
}

// names lists the event files in name (so timestamp) order.
func (b *bashEvents) names() ([]string, error) {
	if err := b.ensure(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, asPyOSError(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// load reads one event file as compact JSON, or nil when it is unreadable
// (_load_event_from_file logs and skips it).
func (b *bashEvents) load(name string) map[string]any {
	raw, err := os.ReadFile(filepath.Join(b.dir, name))
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

// bashTime is how the events' timestamps are dumped.
func bashTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

type bashCommand struct {
	Kind      string  `json:"kind"`
	ID        string  `json:"id"`
	Timestamp string  `json:"timestamp"`
	Command   string  `json:"command"`
	Cwd       *string `json:"cwd"`
	Timeout   int     `json:"timeout"`
	// at is Timestamp's time.
	at time.Time
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
	return bashError{Kind: "BashError", ID: newUUID(), Timestamp: bashTime(time.Now()), Code: code, Detail: detail}
}

// errorCode is the class name the server reports for err.
func errorCode(err error) string {
	var pe pyOSError
	if errors.As(err, &pe) {
		return pe.class
	}
	return "Exception"
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
	if !s.bash.subscribe(live) {
		c.Close(websocket.StatusTryAgainLater, "Too many bash event connections")
		return
	}
	defer s.bash.unsubscribe(live)
	if resend == "all" {
		// page_iterator(search_bash_events): the files, in order; an
		// error escapes the handler and the socket closes 1011.
		names, err := s.bash.names()
		if err != nil {
			c.Close(websocket.StatusInternalError, "")
			return
		}
		for _, n := range names {
			ev := s.bash.load(n)
			if ev == nil {
				continue
			}
			b, _ := json.Marshal(ev)
			if c.Write(ctx, websocket.MessageText, b) != nil {
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
		if _, err := s.startBash(req); err != nil {
			ev, _ := json.Marshal(newBashError(errorCode(err), err.Error()))
			if c.Write(ctx, websocket.MessageText, ev) != nil {
				return
			}
		}
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
	now := time.Now()
	cmd := bashCommand{Kind: "BashCommand", ID: newUUID(), Timestamp: bashTime(now), Timeout: 300, at: now}
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

// startBash is start_bash_command: the command is saved and published
// (an error there is returned, nothing runs), then run in the background;
// its output is saved and published when it ends, and done is closed.
func (s *Server) startBash(cmd bashCommand) (done <-chan struct{}, err error) {
	if err := s.bash.publish(cmd.at, cmd.Kind, "", cmd.ID, cmd); err != nil {
		return nil, err
	}
	ch := make(chan struct{})
	if !s.track.add() {
		close(ch)
		return ch, nil
	}
	go func() {
		defer close(ch)
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
		out := func(ev bashOutput) {
			now := time.Now()
			ev.Kind, ev.ID, ev.Timestamp, ev.CommandID, ev.Order = "BashOutput", newUUID(), bashTime(now), cmd.ID, order
			if err := s.bash.publish(now, ev.Kind, ev.CommandID, ev.ID, ev); err != nil {
				s.log.Error("standin: bash event", "err", err)
			}
			order++
		}
		chunks := func(rest string, stderr bool) string {
			for len(rest) > maxBashChunk {
				chunk := rest[:maxBashChunk]
				if stderr {
					out(bashOutput{Stderr: &chunk})
				} else {
					out(bashOutput{Stdout: &chunk})
				}
				rest = rest[maxBashChunk:]
			}
			return rest
		}
		stdout, stderr := chunks(res.Stdout, false), chunks(res.Stderr, true)
		code := res.ExitCode
		if res.TimedOut {
			code = -1
		}
		final := bashOutput{ExitCode: &code}
		if stdout != "" {
			final.Stdout = &stdout
		}
		if stderr != "" {
			final.Stderr = &stderr
		}
		out(final)
	}()
	return ch, nil
}
