package proxy

import (
	"net/http"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// workspaceSession answers POST and DELETE /api/auth/workspace-session as
// the agent server does (reference §8), for when ohd has no upstream to
// pass it to: POST sets the oh_workspace_session_key cookie to the key of
// the request's X-Session-API-Key header (checked by route), DELETE
// expires it; both 204. With an upstream (--upstream) the route is the
// upstream's, passed on: it is not a conversation's, and the upstream's
// cookie carries the same key, which ohd's workspace routes accept
// (requestKey).
func (s *Server) workspaceSession(w http.ResponseWriter, r *http.Request) {
	if s.up != nil {
		s.passUpstream(w, r)
		return
	}
	key := ""
	if r.Method == http.MethodPost {
		key = r.Header.Get("X-Session-API-Key")
	}
	http.SetCookie(w, openhands.WorkspaceSessionCookie(key, openhands.SecureContext(r)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
