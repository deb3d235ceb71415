package proxy

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/openhands"
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

// isolatedWorkspace maps a create's working_dir of Canvas's isolated mode
// (openhands.IsolatedWorkingDir, /workspace, which the agent server's
// docker runtime mounts a fresh folder at: ref §5 "Mounts", §10) to a
// fresh folder for conversation id, when no /workspace exists on ohd's
// host: <first --workspace-root>/<id hex>, or without one
// <the upstream's home>/workspace/project/<id hex>, where Canvas makes its
// default folders. It reports false with a message when there is no root
// to make it under, and false with "" for any other working_dir.
func (s *Server) isolatedWorkspace(r *http.Request, workingDir, id string) (string, bool, string) {
	if filepath.Clean(workingDir) != openhands.IsolatedWorkingDir {
		return "", false, ""
	}
	if _, err := os.Lstat(openhands.IsolatedWorkingDir); !errors.Is(err, fs.ErrNotExist) {
		return "", false, "" // the host's own /workspace: taken as it is
	}
	hex := strings.ReplaceAll(id, "-", "")
	if len(s.opts.WorkspaceRoots) > 0 {
		return filepath.Join(s.opts.WorkspaceRoots[0], hex), true, ""
	}
	if s.up != nil {
		if h := s.upstreamHomeDir(r); h != "" {
			return filepath.Join(h, "workspace", "project", hex), true, ""
		}
	}
	return "", false, "workspace.working_dir " + openhands.IsolatedWorkingDir + " (Agent Canvas's isolated mode) gets a fresh folder of its own under ohd's --workspace-root, and none is set: start ohd with --workspace-root DIR, or pick a folder"
}
