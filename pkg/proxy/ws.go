package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
)

// WebSocket close codes ohd sends.
const (
	// CloseAuthFailed: no valid key by header, query or first message.
	CloseAuthFailed websocket.StatusCode = 4001
	// CloseUnknownConversation: no such conversation (also a malformed
	// id): the agent server's 4004, which the SDK treats as fatal
	// (reference §7, §8); 1008 would make it retry forever.
	CloseUnknownConversation websocket.StatusCode = 4004
	// CloseUpstreamFailed: the inner server could not be started,
	// reached, or its connection failed.
	CloseUpstreamFailed = websocket.StatusInternalError // 1011
)

// authMessageLimit bounds the first-message authentication frame.
const authMessageLimit = 64 << 10

// parseAuthMessage reports the key of a first-message authentication
// frame {"type":"auth","session_api_key":"..."}, and whether the frame is
// one. Field names match exactly, as in the agent server.
func parseAuthMessage(typ websocket.MessageType, b []byte) (string, bool) {
	if typ != websocket.MessageText {
		return "", false
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil || m == nil {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false
	}
	var kind, key string
	if json.Unmarshal(m["type"], &kind) != nil || kind != "auth" {
		return "", false
	}
	if json.Unmarshal(m["session_api_key"], &key) != nil || isNull(m["session_api_key"]) {
		return "", false
	}
	return key, true
}

// isAuthControl reports whether a client frame is an authentication
// control message: a JSON object whose only keys are "type" (= "auth")
// and optionally "session_api_key" (sockets.py L497-503).
func isAuthControl(typ websocket.MessageType, b []byte) bool {
	if typ != websocket.MessageText || len(b) > authMessageLimit {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	var kind string
	if json.Unmarshal(m["type"], &kind) != nil || kind != "auth" {
		return false
	}
	for k := range m {
		if k != "type" && k != "session_api_key" {
			return false
		}
	}
	return true
}

// keyState is how a WebSocket upgrade request carries a key.
type keyState int

const (
	keyAbsent keyState = iota
	keyValid
	keyInvalid
)

// wsKey checks the key of an upgrade request: the X-Session-API-Key
// header, or the agent server's (deprecated) session_api_key query
// parameter, which browsers need because they cannot set headers on a
// WebSocket.
func (s *Server) wsKey(r *http.Request) keyState {
	v := r.Header.Get("X-Session-API-Key")
	if v == "" {
		v = r.URL.Query().Get("session_api_key")
	}
	switch {
	case v == "":
		return keyAbsent
	case s.keys.valid(v):
		return keyValid
	}
	return keyInvalid
}

func isUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h[http.CanonicalHeaderKey(name)] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// socket returns the handler of WS /sockets/<kind>/{id} ("events", the
// legacy socket, or "session", the v2 one with ?after_seq=): it
// authenticates the client, connects to the same socket of the
// conversation's inner server with the inner key (the query passed on
// minus its credentials) and bridges the two.
func (s *Server) socket(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.bridgeSocket(w, r, kind) }
}

func (s *Server) bridgeSocket(w http.ResponseWriter, r *http.Request, kind string) {
	ks := s.wsKey(r)
	if !isUpgrade(r) {
		if ks != keyValid {
			writeUnauthorized(w)
			return
		}
		writeDetail(w, http.StatusBadRequest, "/sockets/"+kind+"/{id} is a WebSocket: connect with a WebSocket client")
		return
	}
	c, done, _ := s.acceptAuthenticated(w, r, ks)
	if c == nil {
		return
	}
	code := websocket.StatusAbnormalClosure
	defer func() { done(code) }()
	id, ok := parseID(r.PathValue("id"))
	if !ok {
		code = CloseUnknownConversation
		_ = c.Close(code, "Conversation not found")
		return
	}
	code = s.bridgeConversation(r.Context(), c, id, "/sockets/"+kind+"/"+id, r.URL.RawQuery)
}

// cidSocket serves a WebSocket on one of the agent server's global
// sockets (/sockets/bash-events) that names a conversation with ?cid=:
// authenticated as a conversation's socket (a bad key refused before the
// upgrade, else the first message), then bridged to the same socket of
// that conversation's inner server, the query passed on without cid and
// the client's credentials. A malformed cid is refused before the upgrade
// with the validation error of the HTTP routes; an unknown conversation
// closes 4004, as on /sockets/events/{id}.
func (s *Server) cidSocket(w http.ResponseWriter, r *http.Request) {
	ks := s.wsKey(r)
	if ks == keyInvalid {
		refuseSocketKey(w)
		return
	}
	cid := r.URL.Query().Get(openhands.CIDParam)
	id, ok := parseID(cid)
	if !ok {
		writeValidation(w, uuidError(cid, "query", openhands.CIDParam))
		return
	}
	c, done, _ := s.acceptAuthenticated(w, r, ks)
	if c == nil {
		return
	}
	code := websocket.StatusAbnormalClosure
	defer func() { done(code) }()
	code = s.bridgeConversation(r.Context(), c, id, r.URL.EscapedPath(), dropQueryParam(r.URL.RawQuery, openhands.CIDParam))
}

// bridgeConversation connects the accepted and authenticated client socket
// c to innerPath on conversation id's inner server (starting it if it is
// stopped), with the inner key and rawQuery minus its credentials, and
// bridges the two. It returns the close code sent to the client: 4004 for
// a conversation that does not exist, 1011 when its server cannot be
// started or reached.
func (s *Server) bridgeConversation(ctx context.Context, c *websocket.Conn, id, innerPath, rawQuery string) websocket.StatusCode {
	closeWith := func(sc websocket.StatusCode, reason string) websocket.StatusCode {
		_ = c.Close(sc, reason)
		return sc
	}
	if _, ok := s.visible(id); !ok {
		return closeWith(CloseUnknownConversation, "Conversation not found")
	}
	t, err := s.conv.Target(ctx, id)
	if err != nil {
		if errors.Is(err, conversation.ErrNotFound) {
			return closeWith(CloseUnknownConversation, "Conversation not found")
		}
		s.log.Warn("conversation API: websocket: conversation could not be started", "id", id, "err", err)
		return closeWith(CloseUpstreamFailed, "conversation server unavailable")
	}
	if t.Addr == "" {
		return closeWith(CloseUpstreamFailed, "conversation has no agent server (local runtime)")
	}
	s.conv.Touch(id)
	up, err := s.dialInner(ctx, innerPath, t, rawQuery)
	if err != nil {
		s.log.Warn("conversation API: websocket: inner server refused or unreachable", "id", id, "path", innerPath, "err", err)
		return closeWith(CloseUpstreamFailed, "conversation server unavailable")
	}
	defer up.CloseNow()
	c.SetReadLimit(s.opts.MaxWSMessage)
	up.SetReadLimit(s.opts.MaxWSMessage)
	return s.bridge(ctx, id, c, up)
}

// firstMessageAuth waits up to Timeouts.WSAuth for the client's
// {"type":"auth","session_api_key":"..."} frame. It returns 0 and the key
// if the client authenticated, else the code it closed the connection
// with. The
// read runs apart from the timer because coder/websocket drops a
// connection whose read context ends, and the client must get 4001, not a
// reset.
func (s *Server) firstMessageAuth(ctx context.Context, c *websocket.Conn) (websocket.StatusCode, string) {
	type result struct {
		typ websocket.MessageType
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		typ, b, err := c.Read(context.Background())
		ch <- result{typ, b, err}
	}()
	t := time.NewTimer(s.t.WSAuth)
	defer t.Stop()
	code := CloseAuthFailed
	select {
	case res := <-ch:
		if res.err == nil {
			if key, ok := parseAuthMessage(res.typ, res.b); ok && s.keys.valid(key) {
				return 0, key
			}
		}
		_ = c.Close(code, "Authentication failed")
		return code, ""
	case <-t.C:
	case <-ctx.Done():
		code = websocket.StatusGoingAway
	case <-s.closing:
		code = websocket.StatusGoingAway
	}
	reason := "Authentication failed"
	if code == websocket.StatusGoingAway {
		reason = "ohd is shutting down"
	}
	// The pending read ends with the close.
	_ = c.Close(code, reason)
	c.CloseNow()
	<-ch
	return code, ""
}

// dialInner opens the WebSocket to the inner server, authenticated with
// the inner key, with the client's query minus its credentials.
func (s *Server) dialInner(ctx context.Context, path string, t conversation.Target, rawQuery string) (*websocket.Conn, error) {
	u := url.URL{Scheme: "ws", Host: t.Addr, Path: path, RawQuery: stripAuthQuery(rawQuery)}
	ctx, cancel := context.WithTimeout(withTarget(ctx, t), s.t.Dial+10*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("X-Session-API-Key", string(t.InnerKey))
	up, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:      &http.Client{Transport: s.transport, CheckRedirect: s.client.CheckRedirect},
		HTTPHeader:      h,
		CompressionMode: websocket.CompressionDisabled,
	})
	if resp != nil && resp.Body != nil && err != nil {
		resp.Body.Close()
	}
	return up, err
}

// pumpResult is how one direction of a bridge ended.
type pumpResult struct {
	fromClient bool
	readErr    error // reading the source failed (or it closed)
	writeErr   error // writing to the destination failed
}

// bridge copies messages both ways (for conversation id, or "" for the
// upstream's sockets) until one side closes or fails, then
// closes the other side, with the same code when it may be sent on. It
// returns the code sent to the client. Each direction has its own
// goroutine and buffer; a write waits at most Timeouts.WSWrite, so a
// client that does not read is disconnected instead of holding anything
// but its own connection.
func (s *Server) bridge(ctx context.Context, id string, client, up *websocket.Conn) websocket.StatusCode {
	var last atomic.Int64
	touch := func() {
		now := time.Now().UnixNano()
		if prev := last.Load(); id != "" && now-prev >= int64(time.Second) && last.CompareAndSwap(prev, now) {
			s.conv.Touch(id)
		}
	}
	results := make(chan pumpResult, 2)
	go func() { results <- s.pump(client, up, true, touch) }()
	go func() { results <- s.pump(up, client, false, touch) }()

	stopPing := make(chan struct{})
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		s.keepalive(client, stopPing)
	}()
	defer func() {
		close(stopPing)
		<-pingDone
	}()

	var first pumpResult
	code := websocket.StatusAbnormalClosure
	select {
	case first = <-results:
	case <-ctx.Done():
		code = s.closeBoth(client, up, websocket.StatusGoingAway, "ohd is shutting down", results)
		return code
	case <-s.closing:
		code = s.closeBoth(client, up, websocket.StatusGoingAway, "ohd is shutting down", results)
		return code
	}
	switch {
	case first.fromClient && first.readErr != nil:
		// The client closed (or its connection broke): tell the inner
		// server the same.
		var ce websocket.CloseError
		if errors.As(first.readErr, &ce) && sendable(ce.Code) {
			_ = up.Close(ce.Code, ce.Reason)
			code = ce.Code
		} else {
			_ = up.Close(websocket.StatusGoingAway, "client went away")
		}
		client.CloseNow()
	case !first.fromClient && first.readErr != nil:
		var ce websocket.CloseError
		if errors.As(first.readErr, &ce) && sendable(ce.Code) {
			code = ce.Code
			_ = client.Close(ce.Code, ce.Reason)
		} else {
			code = CloseUpstreamFailed
			_ = client.Close(CloseUpstreamFailed, "conversation server connection lost")
		}
		up.CloseNow()
	case first.fromClient: // writing to the inner server failed
		up.CloseNow()
		code = CloseUpstreamFailed
		_ = client.Close(CloseUpstreamFailed, "conversation server connection lost")
	default: // writing to the client failed or timed out
		client.CloseNow()
		_ = up.Close(websocket.StatusGoingAway, "client went away")
	}
	<-results
	return code
}

// closeBoth closes both sides with code and waits for the pumps.
func (s *Server) closeBoth(client, up *websocket.Conn, code websocket.StatusCode, reason string, results <-chan pumpResult) websocket.StatusCode {
	done := make(chan struct{})
	go func() {
		_ = up.Close(code, reason)
		close(done)
	}()
	_ = client.Close(code, reason)
	<-done
	<-results
	<-results
	return code
}

// sendable reports whether code may be sent in a close frame (1005, no
// status, is sent as a close frame without a code).
func sendable(code websocket.StatusCode) bool {
	switch {
	case code == websocket.StatusNoStatusRcvd:
		return true
	case code == 1004 || code == websocket.StatusAbnormalClosure || code == websocket.StatusTLSHandshake:
		return false
	case code >= 1000 && code <= 1014, code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// maxKeptBuffer is the largest message buffer a pump keeps between
// messages; a larger one is dropped after use.
const maxKeptBuffer = 1 << 20

// pump copies messages from src to dst until one fails. Reads take no
// deadline (closing the connection ends them); a write that lasts longer
// than Timeouts.WSWrite is ended by closing dst (one reusable timer per
// direction, not a context per message).
func (s *Server) pump(src, dst *websocket.Conn, fromClient bool, touch func()) pumpResult {
	var buf bytes.Buffer
	watchdog := time.AfterFunc(time.Hour, func() { dst.CloseNow() })
	watchdog.Stop()
	defer watchdog.Stop()
	for {
		typ, r, err := src.Reader(context.Background())
		if err != nil {
			return pumpResult{fromClient: fromClient, readErr: err}
		}
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			return pumpResult{fromClient: fromClient, readErr: err}
		}
		touch()
		if fromClient && isAuthControl(typ, buf.Bytes()) {
			// A client authenticated already (or by header) may send its
			// auth frame again; the agent server ignores it (reference §7,
			// _is_auth_control_message), and it must not carry the outer
			// key into the container.
			continue
		}
		watchdog.Reset(s.t.WSWrite)
		err = dst.Write(context.Background(), typ, buf.Bytes())
		if !watchdog.Stop() && err == nil {
			err = errors.New("write timed out")
		}
		if err != nil {
			return pumpResult{fromClient: fromClient, writeErr: err}
		}
		if buf.Cap() > maxKeptBuffer {
			buf = bytes.Buffer{}
		}
	}
}

// keepalive pings the client every Timeouts.WSPing until stop is closed;
// a client that does not answer in Timeouts.WSWrite is disconnected.
func (s *Server) keepalive(c *websocket.Conn, stop <-chan struct{}) {
	if s.t.WSPing < 0 {
		return
	}
	t := time.NewTicker(s.t.WSPing)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.t.WSWrite)
		err := c.Ping(ctx)
		cancel()
		if err != nil {
			select {
			case <-stop:
			default:
				c.CloseNow()
			}
			return
		}
	}
}

// acceptAuthenticated authenticates a client socket whose request key is
// ks, as every socket of the agent server does (reference §7): a bad key
// is refused before the upgrade with 403 (the agent server closes before
// accepting, which Starlette turns into 403 on the handshake); a valid one
// is accepted; with none, the socket is accepted and its first message
// must authenticate. It returns nil when the socket ended there (answered,
// or closed with the close code recorded); else the accepted socket, the
// function to call with its final close code, and the key the first
// message carried ("" when the request carried it).
func (s *Server) acceptAuthenticated(w http.ResponseWriter, r *http.Request, ks keyState) (*websocket.Conn, func(websocket.StatusCode), string) {
	if ks == keyInvalid {
		refuseSocketKey(w)
		return nil, nil, ""
	}
	c, done := s.acceptWS(w, r)
	if c == nil {
		return nil, nil, ""
	}
	c.SetReadLimit(authMessageLimit)
	if ks != keyAbsent {
		return c, done, ""
	}
	sc, key := s.firstMessageAuth(r.Context(), c)
	if sc != 0 {
		done(sc)
		return nil, nil, ""
	}
	return c, done, key
}

// refuseSocketKey answers a socket whose request carried a bad key.
func refuseSocketKey(w http.ResponseWriter) {
	writeJSON(w, http.StatusForbidden, errorBody{Detail: "Authentication failed"})
}

// acceptWS upgrades r and counts the socket in the server's WebSocket
// bookkeeping (the shutdown wait, the observer). It returns nil when the
// upgrade failed (Accept has answered) or ohd is shutting down; otherwise
// the caller defers done with the close code.
func (s *Server) acceptWS(w http.ResponseWriter, r *http.Request) (*websocket.Conn, func(websocket.StatusCode)) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// serveHTTP has checked the Origin (cors.go).
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		return nil, nil
	}
	if !s.wsStart() {
		c.Close(websocket.StatusGoingAway, "ohd is shutting down")
		return nil, nil
	}
	start := time.Now()
	if s.obs != nil {
		s.obs.WebSocketOpened()
	}
	return c, func(code websocket.StatusCode) {
		c.CloseNow()
		if s.obs != nil {
			s.obs.WebSocketClosed(int(code), time.Since(start))
		}
		s.wsWG.Done()
	}
}
