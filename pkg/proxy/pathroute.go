package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The agent server's global file, git and bash routes (/api/file/...,
// /api/git/..., /api/bash/...) name the file, repository or directory
// they act on: file and git in their `path` query parameter, the bash
// commands (start_bash_command, execute_bash_command) in their body's
// `cwd`, all absolute paths. The SDK's RemoteWorkspace (v1.43.1,
// remote_workspace_mixin.py L67-380: commands, file upload and download,
// git changes and diff) and older Canvas call them without a
// conversation. Under ohd every conversation's working directory has the
// same absolute path in its container as on the host, so the path names
// the conversation: without ?cid=, a request whose path lies in exactly
// one visible conversation's working directory goes to that
// conversation's inner server, unchanged, with or without an upstream
// (which cannot read the conversation's working directory). A command
// started so is remembered by its id, so the SDK's polls of its output
// (GET /api/bash/bash_events/search?command_id__eq=ID) follow it. A call
// that names no path inside a conversation goes to the upstream; without
// one it is answered 404 saying how to name the conversation. GET
// /api/file/download-trajectory/{id} names its conversation by id: the
// zip comes from that conversation's server.
var pathRouters = []string{"/api/file/", "/api/git/"}

// bashStarts are the bash routes whose body's cwd names the conversation.
var bashStarts = []string{"/api/bash/start_bash_command", "/api/bash/execute_bash_command"}

const (
	trajectoryPrefix = "/api/file/download-trajectory/"
	bashSearch       = "/api/bash/bash_events/search"
	maxBashOwners    = 4096
	maxCWDBody       = 1 << 20
)

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
// whether one does. Conversations that share a folder (in place, any
// number may) give the newest: the SDK and Canvas work with the
// conversation they made last, and the folder's files are the same for
// all of them.
func (s *Server) conversationOfPath(p string) (string, bool) {
	if !path.IsAbs(p) {
		return "", false
	}
	p = path.Clean(p)
	var best store.Conversation
	bestLen := -1
	for _, c := range s.visibleList() {
		root := path.Clean(c.WorkingDir)
		if !within(p, root) {
			continue
		}
		if len(root) > bestLen || len(root) == bestLen && c.CreatedAt.After(best.CreatedAt) {
			best, bestLen = c, len(root)
		}
	}
	return best.ID, bestLen >= 0
}

// within reports whether p is root or below it (both clean and absolute).
func within(p, root string) bool {
	if root == "/" || root == "." || root == "" {
		return false // a conversation never owns the whole file system
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// routeByPath forwards r, a global route without ?cid=, to the
// conversation its path names (above), and reports whether it answered.
func (s *Server) routeByPath(w http.ResponseWriter, r *http.Request) bool {
	var id string
	var body []byte
	switch {
	case strings.HasPrefix(r.URL.Path, trajectoryPrefix) && r.Method == http.MethodGet:
		// "Download conversation" (ref §10): the conversation's own server
		// zips its conversation directory, as the real one does.
		c, ok := parseID(strings.TrimPrefix(r.URL.Path, trajectoryPrefix))
		if !ok {
			return false
		}
		if _, known := s.visible(c); !known {
			return false
		}
		id = c
	case isPathRouted(r.URL.Path):
		p := r.URL.Query().Get("path")
		if p == "" {
			return false
		}
		c, ok := s.conversationOfPath(p)
		if !ok {
			return false
		}
		id = c
	case r.Method == http.MethodPost && slices.Contains(bashStarts, r.URL.Path):
		if r.ContentLength > maxCWDBody {
			return false
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, maxCWDBody+1))
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(b))
		if err != nil || len(b) > maxCWDBody {
			writeDetail(w, http.StatusBadRequest, "reading the request body failed or it is over 1 MiB")
			return true
		}
		var cmd struct {
			CWD *string `json:"cwd"`
		}
		if json.Unmarshal(b, &cmd) != nil || cmd.CWD == nil {
			return false
		}
		c, ok := s.conversationOfPath(*cmd.CWD)
		if !ok {
			return false
		}
		id, body = c, b
	case r.Method == http.MethodGet && r.URL.Path == bashSearch:
		cmd := r.URL.Query().Get("command_id__eq")
		s.bashMu.Lock()
		c, ok := s.bashOwners[cmd]
		s.bashMu.Unlock()
		if cmd == "" || !ok {
			return false
		}
		id = c
	default:
		return false
	}
	if r.Header.Get(openhands.ExposeSecretsHeader) != "" {
		writeDetail(w, http.StatusUnprocessableEntity, "X-Expose-Secrets is not supported on a conversation's routes: secrets never leave a conversation's container; drop the header")
		return true
	}
	if body == nil {
		s.forwardTo(w, r, id, r.URL.EscapedPath(), stripAuthQuery(r.URL.RawQuery))
		return true
	}
	// A bash command: its answer's id is remembered, so the polls of its
	// output (which name only the id) reach the same conversation.
	r.ContentLength = int64(len(body))
	rec := &bufferedResponse{header: http.Header{}}
	s.forwardTo(rec, r, id, r.URL.EscapedPath(), stripAuthQuery(r.URL.RawQuery))
	var ans struct {
		ID string `json:"id"`
	}
	if rec.status() == http.StatusOK && json.Unmarshal(rec.body.Bytes(), &ans) == nil && ans.ID != "" {
		s.bashMu.Lock()
		if len(s.bashOwners) >= maxBashOwners {
			for k := range s.bashOwners { // drop one: a bounded memory
				delete(s.bashOwners, k)
				break
			}
		}
		s.bashOwners[ans.ID] = id
		s.bashMu.Unlock()
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status())
	_, _ = w.Write(rec.body.Bytes())
	return true
}

// isConversationRoute reports whether p is a global file, git or bash
// route, which acts on a conversation's files (not /api/file/home, the
// server's own home).
func isConversationRoute(p string) bool {
	return (isPathRouted(p) || strings.HasPrefix(p, "/api/bash/")) && p != "/api/file/home"
}

// noConversationNamed answers a global file, git or bash route that names
// no conversation, without an upstream to take it: 404 (as before, the
// route is not served), saying how to name one.
func noConversationNamed(w http.ResponseWriter, r *http.Request) {
	router := strings.TrimPrefix(r.URL.Path, "/api/")
	writeDetail(w, http.StatusNotFound, "Not Found: "+r.URL.Path+" names no conversation: add ?cid=<conversation id>, or call the conversation's own route /api/conversations/<conversation id>/"+router+
		", or give a path inside the conversation's working directory (file and git: ?path=; bash: the body's cwd); ohd passes such calls to the operator's own agent server only when started with --upstream URL")
}
