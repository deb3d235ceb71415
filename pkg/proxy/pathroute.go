package proxy

import (
	"net/http"
	"path"
	"strings"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// The agent server's global file and git routes (/api/file/...,
// /api/git/...) name the file or repository they act on in their `path`
// query parameter, an absolute path, and the SDK's RemoteWorkspace
// (v1.43.1, remote_workspace_mixin.py L285-380: file upload and
// download, git changes and diff) calls them without a conversation.
// Under ohd every conversation's working directory has the same absolute
// path in its container as on the host and belongs to that conversation
// alone, so the path names the conversation: without ?cid= and without an
// upstream (which would otherwise own the route), a request whose path
// lies in exactly one visible conversation's working directory goes to
// that conversation's inner server, unchanged.
var pathRouters = []string{"/api/file/", "/api/git/"}

func isPathRouted(p string) bool {
	for _, r := range pathRouters {
		if strings.HasPrefix(p, r) {
			return true
		}
	}
	return false
}

// conversationOfPath returns the visible conversation whose working
// directory holds p (the deepest, when one lies in another's), and
// whether exactly one does.
func (s *Server) conversationOfPath(p string) (string, bool) {
	if !path.IsAbs(p) {
		return "", false
	}
	p = path.Clean(p)
	best, bestLen, ties := "", -1, 0
	for _, c := range s.visibleList() {
		root := path.Clean(c.WorkingDir)
		if !within(p, root) {
			continue
		}
		switch {
		case len(root) > bestLen:
			best, bestLen, ties = c.ID, len(root), 1
		case len(root) == bestLen:
			ties++
		}
	}
	return best, ties == 1
}

// within reports whether p is root or below it (both clean and absolute).
func within(p, root string) bool {
	if root == "/" || root == "." || root == "" {
		return false // a conversation never owns the whole file system
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// routeByPath forwards r to the conversation its path query parameter
// names, and reports whether it did.
func (s *Server) routeByPath(w http.ResponseWriter, r *http.Request) bool {
	if !isPathRouted(r.URL.Path) {
		return false
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		return false
	}
	id, ok := s.conversationOfPath(p)
	if !ok {
		return false
	}
	if r.Header.Get(openhands.ExposeSecretsHeader) != "" {
		writeDetail(w, http.StatusUnprocessableEntity, "X-Expose-Secrets is not supported on a conversation's routes: secrets never leave a conversation's container; drop the header")
		return true
	}
	s.forwardTo(w, r, id, r.URL.EscapedPath(), stripAuthQuery(r.URL.RawQuery))
	return true
}
