package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxEchoBody bounds the body /echo/ reads and returns.
const maxEchoBody = 8 << 20

// echoResponse is what /echo/ answers: the request as the standin saw it.
type echoResponse struct {
	Method           string              `json:"method"`
	Path             string              `json:"path"`
	RequestURI       string              `json:"request_uri"`
	RawQuery         string              `json:"raw_query"`
	Host             string              `json:"host"`
	Headers          map[string][]string `json:"headers"`
	TransferEncoding []string            `json:"transfer_encoding"`
	ContentLength    int64               `json:"content_length"`
	Body             string              `json:"body"`
	BodyBytes        int                 `json:"body_bytes"`
	RemoteAddr       string              `json:"remote_addr"`
}

// echo answers with the request it received, headers included: it exists
// so a proxy test can see exactly what was forwarded.
func (s *Server) echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEchoBody))
	if err != nil {
		writeDetail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("echo reads at most %d bytes", maxEchoBody))
		return
	}
	headers := map[string][]string(r.Header.Clone())
	if headers == nil {
		headers = map[string][]string{}
	}
	writeJSON(w, http.StatusOK, echoResponse{
		Method:           r.Method,
		Path:             r.URL.Path,
		RequestURI:       r.RequestURI,
		RawQuery:         r.URL.RawQuery,
		Host:             r.Host,
		Headers:          headers,
		TransferEncoding: r.TransferEncoding,
		ContentLength:    r.ContentLength,
		Body:             string(body),
		BodyBytes:        len(body),
		RemoteAddr:       r.RemoteAddr,
	})
}

// routePrefix is "/api/conversations/<id>" for the routes registered under
// a conversation, else "".
func routePrefix(r *http.Request) string {
	if id := r.PathValue("id"); id != "" {
		return "/api/conversations/" + id
	}
	return ""
}

// redirect answers 302 to an absolute URL built from the Host header, the
// way naive servers leak their own address; a proxy must not pass it on.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("to")
	if to == "" || !strings.HasPrefix(to, "/") || strings.HasPrefix(to, "//") {
		to = routePrefix(r) + "/echo/redirected"
	}
	loc := "http://" + r.Host + to
	w.Header().Set("Location", loc)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusFound)
	fmt.Fprintf(w, "redirecting to %s\n", loc)
}

// failure answers 500 with a body naming the server's own addresses, as a
// careless error page would.
func (s *Server) failure(w http.ResponseWriter, r *http.Request) {
	local := "unknown"
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local = a.String()
	}
	writeDetail(w, http.StatusInternalServerError, fmt.Sprintf(
		"internal error in the agent server listening on %s (local address %s, Host %s)", s.cfg.Addr, local, r.Host))
}

// maxSlow bounds /slow.
const maxSlow = 10 * time.Minute

func (s *Server) slow(w http.ResponseWriter, r *http.Request) {
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxSlow {
		writeValidation(w, validationError{Type: "int_parsing", Loc: []any{"query", "ms"}, Msg: "ms must be an integer from 0 to 600000", Input: r.URL.Query().Get("ms")})
		return
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		writeJSON(w, http.StatusOK, map[string]int{"slept_ms": ms})
	case <-r.Context().Done():
	}
}

// maxStreamEvents bounds /stream.
const maxStreamEvents = 100000

// stream writes n server-sent events, flushing each one.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 0 || n > maxStreamEvents {
		writeValidation(w, validationError{Type: "int_parsing", Loc: []any{"query", "n"}, Msg: fmt.Sprintf("n must be an integer from 0 to %d", maxStreamEvents), Input: q.Get("n")})
		return
	}
	var interval time.Duration
	if v := q.Get("interval_ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > 60000 {
			writeValidation(w, validationError{Type: "int_parsing", Loc: []any{"query", "interval_ms"}, Msg: "interval_ms must be an integer from 0 to 60000", Input: v})
			return
		}
		interval = time.Duration(ms) * time.Millisecond
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for i := range n {
		if i > 0 && interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if _, err := fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// big reads the whole body and reports its size and digest.
func (s *Server) big(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		writeDetail(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"bytes": n, "sha256": hex.EncodeToString(h.Sum(nil))})
}
