package proxy

import (
	"net/http"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// workspaceSession answers POST and DELETE /api/auth/workspace-session as
// the agent server does (reference §8), for when ohd has no upstream to
// pass it to: POST sets the oh_workspace_session_key cookie to the key of
// the request's X-Session-API-Key header (checked by route), DELETE
// expires it; both 204. With an upstream, the route is the upstream's
// (it is not a conversation's), and the upstream's cookie carries the
// same key, which ohd's workspace routes accept.
func (s *Server) workspaceSession(w http.ResponseWriter, r *http.Request) {
	key := ""
	if r.Method == http.MethodPost {
		key = r.Header.Get("X-Session-API-Key")
	}
	http.SetCookie(w, openhands.WorkspaceSessionCookie(key, openhands.SecureContext(r)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// workspaceCookieAuth reports whether r may use the workspace cookie
// instead of the header, and carries a valid key in it: GET of a
// conversation's workspace routes only (reference §8).
func (s *Server) workspaceCookieAuth(r *http.Request) bool {
	if r.Method != http.MethodGet || !openhands.IsWorkspaceRoute(r.URL.Path) {
		return false
	}
	c, err := r.Cookie(openhands.WorkspaceCookie)
	return err == nil && c.Value != "" && s.keys.valid(c.Value)
}
