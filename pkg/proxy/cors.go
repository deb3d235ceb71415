package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// CORS, as the agent server answers it (ref §9 "CORS"; middleware.py
// L34-60, LocalhostCORSMiddleware: Starlette's CORSMiddleware with
// allow_credentials=True, allow_methods=["*"], allow_headers=["*"], no
// expose_headers, max_age 600, that always allows the hosts localhost and
// 127.0.0.1 of any scheme and port). Agent Canvas runs in a browser and
// sends X-Session-API-Key on every call, so the browser preflights each
// one: the preflight is answered here, before any key check, as the
// middleware answers it before the route's dependencies run.
//
// ohd's choices where it differs from the agent server:
//   - [::1] is allowed too (the same loopback, spelled in IPv6);
//   - the workspace cookie routes (/api/auth/workspace-session,
//     /api/conversations/{id}/workspace[/...]) follow the same rule, not
//     the agent server's "any http(s) origin" (CORSDispatcher): a page of
//     a foreign origin cannot read a conversation's files with the
//     browser's cookie;
//   - a WebSocket upgrade from a browser (it carries Origin) is refused
//     (403, before the upgrade) unless its origin is allowed; the agent
//     server's middleware does not look at WebSockets. Clients that are
//     not browsers send no Origin and are not affected.

// corsMethods is Starlette's ALL_METHODS, what allow_methods=["*"] becomes.
var corsMethods = []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}

const corsMaxAge = "600"

// corsPolicy decides which origins a browser may call ohd from.
type corsPolicy struct {
	origins []string // --cors-origin, canonical (scheme://host[:port], lower case)
}

// ParseCORSOrigin checks a --cors-origin value: an origin as a browser
// sends it, scheme://host[:port] with scheme http or https and no path,
// query or user. It returns the canonical form (lower case, no trailing
// slash).
func ParseCORSOrigin(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("--cors-origin %q is not an origin: give it as the browser sends it, scheme://host[:port] (e.g. https://canvas.example.com or http://192.168.1.5:3001)", s)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

func newCORSPolicy(origins []string) (corsPolicy, error) {
	var p corsPolicy
	for _, o := range origins {
		c, err := ParseCORSOrigin(o)
		if err != nil {
			return corsPolicy{}, err
		}
		p.origins = append(p.origins, c)
	}
	return p, nil
}

// allowed reports whether a browser page of origin may call ohd: a
// loopback host (localhost, 127.0.0.1, [::1]) of any scheme and port, as
// LocalhostCORSMiddleware.is_allowed_origin (hostname of urlparse), or
// one of the configured origins, compared exactly as Starlette does
// (`origin in allow_origins`, after ohd's lower-casing).
func (p corsPolicy) allowed(origin string) bool {
	if origin == "" {
		return false
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" {
		switch strings.ToLower(u.Hostname()) {
		case "localhost", "127.0.0.1", "::1":
			return true
		}
	}
	return slices.Contains(p.origins, strings.ToLower(origin))
}

// isPreflight reports whether r is a CORS preflight, as Starlette tells
// one: OPTIONS with Origin and Access-Control-Request-Method.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && len(r.Header.Values("Access-Control-Request-Method")) > 0
}

// cors answers preflights and adds the CORS headers of a simple
// response, then passes every other request to next.
func (s *Server) cors(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next(w, r)
			return
		}
		if isPreflight(r) {
			s.preflight(w, r, origin)
			return
		}
		next(&corsWriter{ResponseWriter: w, origin: origin, allowed: s.corsPolicy.allowed(origin)}, r)
	}
}

// corsWriter sets the CORS headers of a simple response when its head is
// written, replacing any an inner or upstream server set (the real agent
// server behind ohd answers CORS too, and two Access-Control-Allow-Origin
// values make a browser refuse the answer). Starlette adds
// Access-Control-Allow-Credentials to every response of a request with an
// Origin, allowed or not; the origin is echoed, with Vary: Origin, only
// when allowed.
type corsWriter struct {
	http.ResponseWriter
	origin  string
	allowed bool
	done    bool
}

func (c *corsWriter) setHeaders() {
	if c.done {
		return
	}
	c.done = true
	h := c.ResponseWriter.Header()
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			delete(h, k)
		}
	}
	h.Set("Access-Control-Allow-Credentials", "true")
	if c.allowed {
		h.Set("Access-Control-Allow-Origin", c.origin)
		vary := []string{"Origin"}
		for _, v := range h.Values("Vary") {
			for _, f := range strings.Split(v, ",") {
				if f = strings.TrimSpace(f); f != "" && !slices.ContainsFunc(vary, func(x string) bool { return strings.EqualFold(x, f) }) {
					vary = append(vary, f)
				}
			}
		}
		h.Set("Vary", strings.Join(vary, ", "))
	}
}

func (c *corsWriter) WriteHeader(code int) {
	c.setHeaders()
	c.ResponseWriter.WriteHeader(code)
}

func (c *corsWriter) Write(b []byte) (int, error) {
	c.setHeaders()
	return c.ResponseWriter.Write(b)
}

func (c *corsWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *corsWriter) Flush() {
	c.setHeaders()
	_ = http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *corsWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c.setHeaders()
	return http.NewResponseController(c.ResponseWriter).Hijack()
}

// preflight answers an OPTIONS preflight as Starlette's
// preflight_response: 200 "OK" for an allowed origin and method, else 400
// "Disallowed CORS origin|method|private-network" (Access-Control-Allow-Origin
// only when the origin is allowed).
// The requested headers are echoed (allow_headers=["*"]).
func (s *Server) preflight(w http.ResponseWriter, r *http.Request, origin string) {
	h := w.Header()
	h.Set("Vary", "Origin")
	h.Set("Access-Control-Allow-Methods", strings.Join(corsMethods, ", "))
	h.Set("Access-Control-Max-Age", corsMaxAge)
	if v := r.Header.Values("Access-Control-Request-Headers"); len(v) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(v, ", "))
	}
	h.Set("Access-Control-Allow-Credentials", "true")
	var failures []string
	if s.corsPolicy.allowed(origin) {
		h.Set("Access-Control-Allow-Origin", origin)
	} else {
		failures = append(failures, "origin")
	}
	if !slices.Contains(corsMethods, r.Header.Get("Access-Control-Request-Method")) {
		failures = append(failures, "method")
	}
	// allow_private_network is False in LocalhostCORSMiddleware: a
	// Private Network Access preflight is refused (Starlette 1.3.1, the
	// version the agent server's uv.lock pins, cors.py L136-140).
	if len(r.Header.Values("Access-Control-Request-Private-Network")) > 0 {
		failures = append(failures, "private-network")
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if len(failures) > 0 {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte("Disallowed CORS " + strings.Join(failures, ", ")))
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("OK"))
}

// wsOriginAllowed reports whether a WebSocket upgrade may proceed: one
// without Origin (not a browser), or from an allowed origin. A browser
// page of another origin is refused with 403 before the upgrade.
func (s *Server) wsOriginAllowed(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || s.corsPolicy.allowed(origin) {
		return true
	}
	writeJSON(w, http.StatusForbidden, errorBody{Detail: "WebSocket from origin " + strings.Map(printableASCII, origin) + " refused: ohd accepts browser pages on localhost, 127.0.0.1 and [::1] only, unless ohd serve --cors-origin ORIGIN names the page's origin"})
	return false
}
