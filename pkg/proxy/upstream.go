package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// upstream is the operator's own agent server (Options.Upstream): what is
// not a conversation's passes to it.
type upstream struct {
	url       *url.URL
	name      string // how errors name it: "the upstream agent server <url> (--upstream)"
	transport *http.Transport
	rp        *httputil.ReverseProxy
}

// upstreamKey is the context key of a request passed to the upstream
// (its body, for the 413 of an oversized one).
type upstreamKey struct{}

func (s *Server) newUpstream(u *url.URL) *upstream {
	up := &upstream{url: u, name: "the upstream agent server " + u.Redacted() + " (--upstream)"}
	d := &net.Dialer{Timeout: s.t.Dial, KeepAlive: 30 * time.Second}
	up.transport = &http.Transport{
		Proxy:                 nil, // the upstream is on this host
		DialContext:           d.DialContext,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: s.t.ResponseHeader,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // bodies pass as the upstream encoded them
	}
	up.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out.URL
			out.Scheme, out.Host, out.User = u.Scheme, u.Host, nil
			if base := strings.TrimSuffix(u.EscapedPath(), "/"); base != "" {
				out.Path = strings.TrimSuffix(u.Path, "/") + pr.In.URL.Path
				out.RawPath = base + pr.In.URL.EscapedPath()
			}
			// The client's Host is kept: URLs and cookies the upstream
			// makes name ohd (and the agent server decides on Secure
			// cookies by host, ref §8).
			if pr.Out.Host == "" {
				pr.Out.Host = "localhost"
			}
		},
		Transport: up.transport,
		ModifyResponse: func(resp *http.Response) error {
			scrubHeaders(resp.Header, u.Host)
			if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotModified && resp.Request.Method != http.MethodHead {
				scrubErrorBody(resp, u.Host)
			}
			return nil
		},
		ErrorHandler: s.upstreamError,
		BufferPool:   bufferPool{},
		ErrorLog:     s.rp.ErrorLog,
	}
	return up
}

// passUpstream serves every route that is not a conversation's: with
// ?cid= on one of the agent server's global routers or sockets, the named
// conversation's inner server; else the upstream; without an upstream,
// 404 naming the flag.
func (s *Server) passUpstream(w http.ResponseWriter, r *http.Request) {
	if isUpgrade(r) {
		if r.URL.Query().Get(openhands.CIDParam) != "" && openhands.IsGlobalSocket(r.URL.Path) {
			s.cidSocket(w, r)
			return
		}
		s.upstreamWS(w, r)
		return
	}
	if !s.keys.valid(r.Header.Get("X-Session-API-Key")) {
		writeUnauthorized(w)
		return
	}
	if cid := r.URL.Query().Get(openhands.CIDParam); cid != "" && openhands.IsGlobalRouter(r.URL.Path) {
		if r.Header.Get(openhands.ExposeSecretsHeader) != "" {
			writeDetail(w, http.StatusUnprocessableEntity, "X-Expose-Secrets is not supported on a conversation's routes: secrets never leave a conversation's container; drop the header")
			return
		}
		id, ok := parseID(cid)
		if !ok {
			writeValidation(w, uuidError(cid, "query", openhands.CIDParam))
			return
		}
		s.forwardTo(w, r, id, r.URL.EscapedPath(), dropQueryParam(stripAuthQuery(r.URL.RawQuery), openhands.CIDParam))
		return
	}
	if s.routeByPath(w, r) {
		return
	}
	if s.up == nil && isConversationRoute(r.URL.Path) {
		noConversationNamed(w, r)
		return
	}
	if s.up == nil {
		writeDetail(w, http.StatusNotFound, "Not Found: "+r.URL.Path+" is not a conversation's route (a file or git route goes to the conversation whose working directory holds its path, or to ?cid=ID), and ohd passes those to the operator's own agent server only when started with --upstream URL (e.g. --upstream http://127.0.0.1:18000)")
		return
	}
	if r.ContentLength > s.opts.MaxBody {
		writeTooLarge(w, s.opts.MaxBody)
		return
	}
	body := &limitedBody{r: r.Body, n: s.opts.MaxBody}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	s.up.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, body)))
}

// upstreamError answers a request the upstream did not answer: 413 for a
// body over the limit, 504 when it did not answer in time, else 502, each
// naming the upstream.
func (s *Server) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	b, _ := r.Context().Value(upstreamKey{}).(*limitedBody)
	if s.answeredForClient(w, r, b, err) {
		return
	}
	s.log.Warn("conversation API: the upstream agent server failed", "method", r.Method, "path", r.URL.Path, "err", err)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		writeJSON(w, http.StatusGatewayTimeout, errorBody{Detail: s.up.name + " did not answer in time"})
		return
	}
	// The upstream's address is the operator's own setting: named, unlike
	// an inner server's.
	writeJSON(w, http.StatusBadGateway, errorBody{Detail: s.up.name + " is unreachable: start it, or point --upstream at it"})
}

// upstreamWS bridges a WebSocket that is not a conversation's
// (/sockets/bash-events, ...) to the upstream, after authenticating the
// client as on /sockets/events/{id}. The upstream gets the key the
// client authenticated with, in the header.
func (s *Server) upstreamWS(w http.ResponseWriter, r *http.Request) {
	if s.up == nil {
		writeDetail(w, http.StatusNotFound, "Not Found: "+r.URL.Path+" is not a conversation's WebSocket, and ohd passes those to the operator's own agent server only when started with --upstream URL")
		return
	}
	c, done, key := s.acceptAuthenticated(w, r, s.wsKey(r))
	if c == nil {
		return
	}
	code := websocket.StatusAbnormalClosure
	defer func() { done(code) }()
	if key == "" {
		if key = r.Header.Get("X-Session-API-Key"); key == "" {
			key = r.URL.Query().Get("session_api_key")
		}
	}
	u := *s.up.url
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	u.RawPath = ""
	u.RawQuery = stripAuthQuery(r.URL.RawQuery)
	ctx, cancel := context.WithTimeout(r.Context(), s.t.Dial+10*time.Second)
	h := http.Header{}
	h.Set("X-Session-API-Key", key)
	up, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:      &http.Client{Transport: s.up.transport, CheckRedirect: s.client.CheckRedirect},
		HTTPHeader:      h,
		CompressionMode: websocket.CompressionDisabled,
	})
	cancel()
	if resp != nil && resp.Body != nil && err != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
	if err != nil {
		s.log.Warn("conversation API: websocket: the upstream agent server refused or is unreachable", "path", r.URL.Path, "err", err)
		code = CloseUpstreamFailed
		reason := "upstream agent server unavailable"
		if resp != nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
			code, reason = CloseAuthFailed, "Authentication failed"
		}
		_ = c.Close(code, reason)
		return
	}
	defer up.CloseNow()
	c.SetReadLimit(s.opts.MaxWSMessage)
	up.SetReadLimit(s.opts.MaxWSMessage)
	code = s.bridge(r.Context(), "", c, up)
}

// dropQueryParam removes every parameter name from a raw query, keeping
// the rest byte for byte.
func dropQueryParam(raw, name string) string {
	return dropQuery(raw, func(k string) bool { return k == name })
}

// readUpstreamSecret reads the upstream's saved secret name (GET
// /api/settings/secrets/{name}, answered text/plain with the raw value,
// ref §3) with the headers of the client's LookupSecret.
func (s *Server) readUpstreamSecret(ctx context.Context, name string, headers map[string]string) ([]byte, error) {
	u := *s.up.url
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/settings/secrets/" + name
	u.RawPath = ""
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: s.up.transport, CheckRedirect: s.client.CheckRedirect}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s is unreachable", s.up.name)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20+1))
	if err != nil || len(b) > 1<<20 {
		return nil, fmt.Errorf("%s: the answer could not be read or is over 1 MiB", s.up.name)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		clear(b)
		return nil, fmt.Errorf("%s answered %d", s.up.name, resp.StatusCode)
	}
	return b, nil
}
