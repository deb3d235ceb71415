package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
)

// Errors returned by Serve and New, tested with errors.Is.
var (
	// ErrNonLoopback: Serve was given a listener on a non-loopback address
	// without Options.AllowRemote.
	ErrNonLoopback = errors.New("refusing a non-loopback listener")
	// ErrNoKeys: New was given no session API key.
	ErrNoKeys = errors.New("no session API key configured")
)

// errorBody is the JSON body of every error ohd itself answers: the agent
// server's {"detail": ...}, plus, for a failed create, the step that failed
// and the conversation id.
type errorBody struct {
	Detail         string `json:"detail"`
	Step           string `json:"step,omitempty"`
	ConversationID string `json:"conversation_id,omitempty"`
}

// validationError is one entry of FastAPI's 422 body
// {"detail": [{"type", "loc", "msg", "input"}]}.
type validationError struct {
	Type  string `json:"type"`
	Loc   []any  `json:"loc"`
	Msg   string `json:"msg"`
	Input any    `json:"input"`
}

// writeJSON writes v as a JSON body with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"detail":"ohd could not encode its answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeDetail writes {"detail": msg}; msg is scrubbed of loopback
// addresses first.
func writeDetail(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Detail: scrubLoopback(msg)})
}

// writeValidation writes FastAPI's 422 shape.
func writeValidation(w http.ResponseWriter, errs ...validationError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": errs})
}

// loopbackAddr matches host:port forms of loopback and unspecified
// addresses, which in ohd can only name the inner server (its published
// port) or something else on this host that a client has no business
// knowing about.
var loopbackAddr = regexp.MustCompile(`(?i)(?:(?:https?|wss?)://)?(?:127(?:\.\d{1,3}){3}|localhost|\[::1\]|\[::\]|0\.0\.0\.0|\[::ffff:127(?:\.\d{1,3}){3}\]):\d{1,5}`)

// scrubbedAddr replaces an inner address in what a client sees.
const scrubbedAddr = "[conversation server]"

// scrubLoopback replaces every loopback host:port (with an optional URL
// scheme) in s.
func scrubLoopback(s string) string {
	if !strings.Contains(s, ":") || !(strings.Contains(s, "127.") || strings.Contains(s, "0.0.0.0") ||
		strings.Contains(s, "[::") || strings.Contains(strings.ToLower(s), "localhost")) {
		return s
	}
	return loopbackAddr.ReplaceAllString(s, scrubbedAddr)
}

// writeUnauthorized answers a request without a valid session key as the
// agent server does: 401 {"detail":"Unauthorized"} (dependencies.py
// L24-36, an HTTPException(401) without detail; ref §8). A header says
// what to send, for people reading the answer.
func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("X-Ohd-Hint", "send a valid session API key in the X-Session-API-Key header")
	writeJSON(w, http.StatusUnauthorized, errorBody{Detail: "Unauthorized"})
}
