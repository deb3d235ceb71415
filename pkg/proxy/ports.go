package proxy

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// VS Code and the desktop of a conversation (ref §9; openhands/ports.go).
// The agent server's image serves openvscode-server on port 8001 and noVNC
// on 8002 inside the container, and hands out their URLs from GET
// /api/vscode/url and GET /api/desktop/url: http://localhost:8001/...?tkn=
// <its first session key>&folder=... and <base_url>/vnc.html?... The
// ports are never published, and that tkn is the inner session key, so
// ohd answers those routes itself for ?cid=ID:
//
//	GET /api/vscode/url?cid=ID     the inner server's answer, its url rewritten to
//	                               http://<ohd>/ohd/conversations/ID/vscode/?folder=...&ohd_port_token=T
//	GET /api/desktop/url?cid=ID    the same for http://<ohd>/ohd/conversations/ID/desktop/vnc.html?...&path=...&ohd_port_token=T
//	GET /api/conversations/ID/vscode/url, .../desktop/url   the same (the newer server's scoped routes, ref §10)
//	GET /api/conversations/ID/vscode/status                 the inner server's /api/vscode/status
//	ANY /ohd/conversations/ID/vscode/...    proxied (HTTP and WebSocket) to port 8001 in the container's
//	                                        network namespace, path unchanged (VS Code runs with that base path)
//	ANY /ohd/conversations/ID/desktop/...   to port 8002, the prefix stripped (noVNC serves from its root)
//	ANY /api/conversations/ID/vscode|desktop/...  the same, for containers started before the editor moved
//	                                        under /ohd (their VS Code's base path), but for the JSON routes
//
// (without cid, both URL routes are the upstream's, as before). Why one
// path under ohd's API rather than a loopback port per conversation: it
// needs no listener per conversation, no port to allocate or leak, and
// the routes sit behind ohd's own authentication and start a stopped
// conversation like every other request; the price is that the agent's
// pages share ohd's origin, as the workspace routes' pages already do in
// the agent server itself (and the session key is a header, never a
// cookie a page could use, besides the workspace cookie, which ohd never
// forwards).
//
// Authentication: a browser cannot send a header when it opens a URL, so
// the URL carries a token, as the real one carries tkn: T =
// base64url(HMAC-SHA256(SHA-256(ohd's first session key), "ohd-port" ID
// service)), per conversation and service, valid until the key changes,
// never the key itself. The first request with ?ohd_port_token=T sets it
// as the cookie ohd_port_<service> (HttpOnly, Path the service's prefix,
// SameSite=None; Secure; Partitioned in a secure context as the
// workspace cookie, else Lax), which the page's later requests and
// WebSockets carry; the header X-Session-API-Key works too. Anything else
// is 401. The token and the client's cookies and credentials are never
// forwarded; VS Code gets its own connection token (the inner key) as
// the cookie vscode-tkn from ohd, and every Set-Cookie it answers is
// dropped, so the inner key never reaches the browser.

const (
	portTokenParam  = "ohd_port_token"
	portCookiePre   = "ohd_port_"
	portDialTimeout = 10 * time.Second
)

// portRoutes registers the routes above on m.
func (s *Server) portRoutes(m *http.ServeMux) {
	for svc := range openhands.PortServices {
		m.Handle("GET /api/"+svc+"/url", s.route(routeUpstream, false, s.portURL(svc)))
		m.Handle("/ohd/conversations/{id}/"+svc, s.route(routeForward, false, s.portSlash(svc)))
		m.Handle("/ohd/conversations/{id}/"+svc+"/{rest...}", s.route(routeForward, false, s.portProxy(svc, openhands.PortPath)))
		// A container started before the editor moved under /ohd runs VS
		// Code with the old base path: still served there, but for the
		// agent server's own JSON routes (ScopedPortRoutes), which the mux
		// prefers for being more specific.
		m.Handle("/api/conversations/{id}/"+svc, s.route(routeForward, false, s.portSlash(svc)))
		m.Handle("/api/conversations/{id}/"+svc+"/{rest...}", s.route(routeForward, false, s.portProxy(svc, openhands.LegacyPortPath)))
		for _, name := range openhands.ScopedPortRoutes[svc] {
			if name == "url" {
				m.Handle("GET /api/conversations/{id}/"+svc+"/url", s.route(routeForward, true, s.scopedPortURL(svc)))
				continue
			}
			m.Handle("GET /api/conversations/{id}/"+svc+"/"+name, s.route(routeForward, true, s.scopedPortJSON(svc, name)))
		}
	}
}

// scopedPortURL answers GET /api/conversations/{id}/<svc>/url, the newer
// agent server's scoped form of /api/<svc>/url?cid= (ref §10): the same
// JSON.
func (s *Server) scopedPortURL(svc string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.portURLOf(w, r, svc, r.PathValue("id"), "path", "conversation_id")
	}
}

// scopedPortJSON answers GET /api/conversations/{id}/<svc>/<name> with the
// conversation's server's own /api/<svc>/<name> (e.g. vscode/status:
// {"running","enabled"}, vscode_router.py).
func (s *Server) scopedPortJSON(svc, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := parseID(r.PathValue("id"))
		if !ok {
			writeValidation(w, uuidError(r.PathValue("id"), "path", "conversation_id"))
			return
		}
		s.forwardTo(w, r, id, "/api/"+svc+"/"+name, stripAuthQuery(r.URL.RawQuery))
	}
}

// isPortTail reports whether rest, the escaped path after
// /api/conversations/, is "<id>/<service>[/...]" (the mux's port routes,
// not the forwarded ones).
func isPortTail(rest string) bool {
	_, tail, _ := strings.Cut(rest, "/")
	first, _, _ := strings.Cut(tail, "/")
	_, ok := openhands.PortServices[first]
	return ok
}

// portToken is the token of conversation id's service svc.
func (s *Server) portToken(id, svc string) string {
	mac := hmac.New(sha256.New, s.keys.digests[0][:])
	mac.Write([]byte("ohd-port\x00" + id + "\x00" + svc))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// portURL answers GET /api/<svc>/url: with ?cid=ID the conversation's
// inner server's answer with its url made one of ohd's; without, the
// upstream's.
func (s *Server) portURL(svc string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cid := r.URL.Query().Get(openhands.CIDParam)
		if cid == "" {
			s.passUpstream(w, r)
			return
		}
		if !s.keys.valid(r.Header.Get("X-Session-API-Key")) {
			writeJSON(w, http.StatusUnauthorized, errorBody{Detail: "Unauthorized: send a valid session API key in the X-Session-API-Key header"})
			return
		}
		if r.Header.Get(openhands.ExposeSecretsHeader) != "" {
			writeDetail(w, http.StatusUnprocessableEntity, "X-Expose-Secrets is not supported on a conversation's routes: secrets never leave a conversation's container; drop the header")
			return
		}
		s.portURLOf(w, r, svc, cid, "query", openhands.CIDParam)
	}
}

// portURLOf answers conversation cid's <svc> URL (the global route's
// ?cid= or the scoped route's path id; where and name locate cid in a
// 422): the inner server's answer, its url made one of ohd's.
func (s *Server) portURLOf(w http.ResponseWriter, r *http.Request, svc, cid, where, name string) {
	id, ok := parseID(cid)
	if !ok {
		writeValidation(w, uuidError(cid, where, name))
		return
	}
	base := clientBase(r)
	query := dropQueryParam(stripAuthQuery(r.URL.RawQuery), openhands.CIDParam)
	q, _ := url.ParseQuery(query)
	if svc == "desktop" {
		// desktop_router.py: the URL is <base_url>/vnc.html?...
		q.Set("base_url", base+openhands.PortPath(id, svc))
	} else {
		q.Del("base_url") // VS Code's base path is set; the host is ohd's
	}
	rec := &bufferedResponse{header: http.Header{}}
	r = r.Clone(r.Context())
	r.Header.Del("Accept-Encoding") // a body ohd rewrites comes plain
	s.forwardTo(rec, r, id, "/api/"+svc+"/url", q.Encode())
	var ans struct {
		URL *string `json:"url"`
	}
	if rec.code == http.StatusServiceUnavailable && rec.header.Get("X-Ohd-Failed-Step") == "" && strings.Contains(rec.body.String(), "disabled in configuration") {
		// vscode_router.py / desktop_router.py: the service is off in
		// the conversation's server; say which ohd flag turns it on.
		env := map[string]string{"vscode": "OH_ENABLE_VSCODE=true", "desktop": "OH_ENABLE_VNC=true"}[svc]
		writeDetail(w, http.StatusServiceUnavailable, "conversation "+id+"'s "+svc+" is turned off in its agent server (the image's default, or the operator's choice); ohd serve --inner-env "+env+" turns it on for conversations started afterwards")
		return
	}
	if rec.code != http.StatusOK || json.Unmarshal(rec.body.Bytes(), &ans) != nil || ans.URL == nil {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status())
		_, _ = w.Write(rec.body.Bytes())
		return
	}
	u, err := url.Parse(*ans.URL)
	// VS Code of a container started before the editor moved answers
	// under LegacyPortPath, which ohd still serves.
	underBase := err == nil && (strings.HasPrefix(u.EscapedPath(), openhands.PortPath(id, svc)+"/") || strings.HasPrefix(u.EscapedPath(), openhands.LegacyPortPath(id, svc)+"/"))
	if err != nil || !underBase && svc == "vscode" {
		// VS Code answers under its base path (Env sets it); an image
		// that ignores it serves from its root, which ohd cannot map.
		writeDetail(w, http.StatusBadGateway, "the conversation's VS Code does not serve under "+openhands.PortPath(id, svc)+"/ (the image ignores "+openhands.VSCodeBasePathEnv+"): ohd cannot serve it")
		return
	}
	uq := u.Query()
	uq.Del("tkn") // the inner session key (vscode_service.py)
	if svc == "desktop" {
		// noVNC opens its WebSocket at /<path>, default websockify.
		uq.Set("path", strings.TrimPrefix(openhands.PortPath(id, svc), "/")+"/websockify")
	}
	uq.Set(portTokenParam, s.portToken(id, svc))
	out := base + u.EscapedPath() + "?" + uq.Encode()
	writeJSON(w, http.StatusOK, map[string]string{"url": out})
}

// clientBase is the scheme and host the client reached ohd at.
func clientBase(r *http.Request) string {
	scheme := "http"
	if openhands.SecureContext(r) && (r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// portSlash redirects /api/conversations/{id}/<svc> to its directory.
func (s *Server) portSlash(svc string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		target := r.URL.EscapedPath() + "/"
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}
}

// portAuthorized reports whether r may reach conversation id's svc, and
// whether it did by the query's token (which then becomes a cookie).
func (s *Server) portAuthorized(r *http.Request, id, svc string) (ok, byQuery bool) {
	if k := r.Header.Get("X-Session-API-Key"); k != "" {
		return s.keys.valid(k), false
	}
	want := []byte(s.portToken(id, svc))
	if t := r.URL.Query().Get(portTokenParam); t != "" {
		return hmac.Equal([]byte(t), want), true
	}
	if c, err := r.Cookie(portCookiePre + svc); err == nil {
		return hmac.Equal([]byte(c.Value), want), false
	}
	return false, false
}

// portProxy serves <prefixOf(id, svc)>/... (openhands.PortPath, or
// LegacyPortPath for containers started before the move).
func (s *Server) portProxy(svc string, prefixOf func(id, svc string) string) http.HandlerFunc {
	port := openhands.PortServices[svc]
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := parseID(r.PathValue("id"))
		if !ok {
			writeDetail(w, http.StatusNotFound, "Not Found")
			return
		}
		authorized, byQuery := s.portAuthorized(r, id, svc)
		if !authorized {
			writeJSON(w, http.StatusUnauthorized, errorBody{Detail: "Unauthorized: open the URL GET /api/conversations/" + id + "/" + svc + "/url (or /api/" + svc + "/url?cid=" + id + ") answers (it carries a token), or send a valid session API key in the X-Session-API-Key header"})
			return
		}
		t, err := s.conv.Target(r.Context(), id)
		if err != nil {
			if _, ok := s.visible(id); !ok {
				writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+id)
				return
			}
			s.targetError(w, id, err)
			return
		}
		if t.DialPort == nil {
			writeDetail(w, http.StatusServiceUnavailable, "conversation "+id+"'s "+svc+" (port "+strconv.Itoa(port)+" in its container) is reachable only inside the container's network namespace, and this ohd cannot enter it (it is not root on the engine's host, or the engine runs elsewhere); ohd publishes only the agent server's port")
			return
		}
		s.conv.Touch(id)
		prefix := prefixOf(id, svc)
		if byQuery {
			c := &http.Cookie{Name: portCookiePre + svc, Value: s.portToken(id, svc), Path: prefix + "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
			if openhands.SecureContext(r) {
				c.SameSite, c.Secure, c.Partitioned = http.SameSiteNoneMode, true, true
			}
			http.SetCookie(w, c)
		}
		innerKey := string(t.InnerKey)
		rp := &httputil.ReverseProxy{
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					ctx, cancel := context.WithTimeout(ctx, portDialTimeout)
					defer cancel()
					return t.DialPort(ctx, port)
				},
				DisableKeepAlives:     true,
				ResponseHeaderTimeout: s.t.ResponseHeader,
			},
			Rewrite: func(pr *httputil.ProxyRequest) {
				out := pr.Out
				out.URL.Scheme, out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				out.Host = pr.In.Host
				if svc == "desktop" {
					p := strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
					if p == "" {
						p = "/"
					}
					out.URL.RawPath = p
					out.URL.Path, _ = url.PathUnescape(p)
				}
				out.URL.RawQuery = dropQueryParam(stripAuthQuery(pr.In.URL.RawQuery), portTokenParam)
				for _, h := range []string{"Cookie", "Authorization", "X-Session-Api-Key", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
					out.Header.Del(h)
				}
				if svc == "vscode" {
					out.Header.Set("Cookie", openhands.VSCodeTokenCookie+"="+innerKey)
				}
			},
			ModifyResponse: func(resp *http.Response) error {
				resp.Header.Del("Set-Cookie")
				return nil
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				s.log.Warn("conversation API: a port of a conversation's container did not answer", "id", id, "service", svc, "err", err)
				writeDetail(w, http.StatusBadGateway, "conversation "+id+"'s "+svc+" does not answer on port "+strconv.Itoa(port)+" in its container (the image may not run it: the agent server starts VS Code only when its image has it, and the desktop only with OH_ENABLE_VNC=true)")
			},
		}
		rp.ServeHTTP(w, r)
	}
}

// bufferedResponse keeps a forwarded answer for portURL to rewrite.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}
func (b *bufferedResponse) Flush() {}
func (b *bufferedResponse) status() int {
	if b.code == 0 {
		return http.StatusOK
	}
	return b.code
}
