package proxy

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
)

// workspaceRoots returns the roots under which a create's missing
// working_dir may be made: the operator's --workspace-root directories
// and, with an upstream, the upstream's home — what Agent Canvas builds
// its default working_dir from (<home>/workspace/project/<hex>, with the
// home from GET /api/file/home, ref §2a step 2). The home is asked of
// the upstream with the client's own key the first time it is needed,
// and kept. For a working_dir that exists, nothing is asked.
func (s *Server) workspaceRoots(r *http.Request, workingDir string) []string {
	roots := append([]string(nil), s.opts.WorkspaceRoots...)
	if _, err := os.Lstat(workingDir); !errors.Is(err, fs.ErrNotExist) || s.up == nil {
		return roots
	}
	if h := s.upstreamHomeDir(r); h != "" {
		roots = append(roots, h)
	}
	return roots
}

// upstreamHomeDir is the upstream's home (file_router.py L760:
// {"home": str(Path.home()), ...}), "" if it cannot be learned.
func (s *Server) upstreamHomeDir(r *http.Request) string {
	s.homeMu.Lock()
	defer s.homeMu.Unlock()
	if s.upstreamHome != "" {
		return s.upstreamHome
	}
	b, status, err := s.upstreamGet(r.Context(), "/api/file/home", r.Header.Get("X-Session-API-Key"))
	if err != nil || status != http.StatusOK {
		s.log.Warn("conversation API: could not learn the upstream's home for a missing working_dir", "status", status, "err", err)
		return ""
	}
	var v struct {
		Home string `json:"home"`
	}
	if json.Unmarshal(b, &v) != nil || !filepath.IsAbs(v.Home) || filepath.Clean(v.Home) == "/" {
		return ""
	}
	s.upstreamHome = filepath.Clean(v.Home)
	return s.upstreamHome
}
