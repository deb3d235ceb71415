package openhands

import (
	"net"
	"net/http"
	"strings"
)

// workspaceCookieMaxAge is the cookie's lifetime: ten years (ref §8).
const workspaceCookieMaxAge = 315360000

// WorkspaceSessionCookie is the Set-Cookie of POST (key set) or DELETE
// (key "": expired) /api/auth/workspace-session, with the attributes the
// agent server gives it (auth_router.py, api.py L406-470): HttpOnly, Path
// /api/conversations, SameSite=None, and Secure plus Partitioned in a
// secure context (SecureContext).
func WorkspaceSessionCookie(key string, secure bool) *http.Cookie {
	c := &http.Cookie{
		Name: WorkspaceCookie, Value: key, Path: "/api/conversations", HttpOnly: true,
		MaxAge: workspaceCookieMaxAge, SameSite: http.SameSiteNoneMode,
		Secure: secure, Partitioned: secure,
	}
	if key == "" {
		c.MaxAge = -1 // Max-Age=0
	}
	return c
}

// SecureContext reports whether the agent server treats r as a secure
// context for the cookie (ref §8): https, X-Forwarded-Proto https, or a
// host (Host or X-Forwarded-Host) of localhost, 127.0.0.1 or ::1.
func SecureContext(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	for _, h := range []string{r.Header.Get("X-Forwarded-Host"), r.Host} {
		if h == "" {
			continue
		}
		host := h
		if hh, _, err := net.SplitHostPort(h); err == nil {
			host = hh
		}
		host = strings.Trim(host, "[]")
		if host == "localhost" || host == "127.0.0.1" || host == "::1" {
			return true
		}
	}
	return false
}
