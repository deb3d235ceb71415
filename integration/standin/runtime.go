package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The agent server's runtime routes that Agent Canvas's terminal, git
// panel and file views call, in both of their forms: the global ones
// (/api/bash, /api/git, /api/file; bash_router.py, git_router.py,
// file_router.py @v1.43.1) and the conversation-scoped ones under
// /api/conversations/{id}/ that newer servers add and advertise with the
// /server_info capability conversation_runtime_routes_v1 (ref §9
// "?cid="). The stand-in serves both and advertises the capability, as a
// newer image does. A subset, with the real shapes:
//
//	{p}/bash/...                         bashroutes.go (bash_router.py), on the event files
//	GET  {p}/git/changes?path=DIR        → [GitChange {"status":"ADDED|DELETED|UPDATED|MOVED","path"}]
//	                                     (git_router.py L115-129; sdk/git/models.py L9-27),
//	                                     [] when DIR is no git work tree (L52-55)
//	GET  {p}/git/diff?path=FILE          → GitDiff {"modified","original"}: the file now and at
//	                                     HEAD, null where absent (L58-71)
//	POST {p}/file/upload?path=FILE       multipart field "file" → Success {"success":true}
//	                                     (file_router.py L68-92: parents made; 400 for a
//	                                     relative path)
//	GET  {p}/file/download?path=FILE     → the bytes, application/octet-stream (L104-126;
//	                                     404 "File not found", 400 "Path is not a file")
//
// {p} is "/api" or "/api/conversations/{id}"; in the scoped form the
// conversation must exist (404 otherwise) and a bash command's default
// cwd is its working_dir.

// capabilityRuntimeRoutes is the capability the scoped routes come with.
const capabilityRuntimeRoutes = "conversation_runtime_routes_v1"

func (s *Server) runtimeRoutes(m *http.ServeMux) {
	for _, p := range []string{"/api", "/api/conversations/{id}"} {
		m.HandleFunc("GET "+p+"/git/changes", s.scoped(s.gitChanges))
		m.HandleFunc("GET "+p+"/git/diff", s.scoped(s.gitDiff))
		m.HandleFunc("POST "+p+"/file/upload", s.scoped(s.fileUpload))
		m.HandleFunc("GET "+p+"/file/download", s.scoped(s.fileDownload))
	}
}

// scoped checks the {id} of a scoped route and passes the conversation's
// working_dir ("" on a global route).
func (s *Server) scoped(h func(w http.ResponseWriter, r *http.Request, workingDir string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := r.PathValue("id")
		if raw == "" {
			h(w, r, "")
			return
		}
		id, err := parseUUID(raw)
		if err != nil {
			writeValidation(w, validationError{Type: "uuid_parsing", Loc: []any{"path", "runtime_conversation_id"}, Msg: "Input should be a valid UUID", Input: raw})
			return
		}
		c, found := s.convs.get(id)
		if !found {
			writeDetail(w, http.StatusNotFound, "Not Found")
			return
		}
		h(w, r, c.Workspace.WorkingDir)
	}
}

// gitChange is the SDK's GitChange.
type gitChange struct {
	Status string `json:"status"`
	Path   string `json:"path"`
}

func (s *Server) gitChanges(w http.ResponseWriter, r *http.Request, _ string) {
	dir := r.URL.Query().Get("path")
	if dir == "" {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"query", "path"}, Msg: "Field required", Input: nil})
		return
	}
	out, err := gitOutput(dir, "status", "--porcelain=v1", "-z", "--untracked-files=all")
	changes := []gitChange{}
	if err != nil {
		writeJSON(w, http.StatusOK, changes) // not a repository: no changes
		return
	}
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		xy, p := f[:2], f[3:]
		st := "UPDATED"
		switch {
		case xy == "??" || strings.Contains(xy, "A"):
			st = "ADDED"
		case strings.Contains(xy, "D"):
			st = "DELETED"
		case strings.Contains(xy, "R"):
			st = "MOVED"
			i++ // the original path follows
		}
		changes = append(changes, gitChange{Status: st, Path: p})
	}
	writeJSON(w, http.StatusOK, changes)
}

func (s *Server) gitDiff(w http.ResponseWriter, r *http.Request, _ string) {
	file := r.URL.Query().Get("path")
	if file == "" {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"query", "path"}, Msg: "Field required", Input: nil})
		return
	}
	var diff struct {
		Modified *string `json:"modified"`
		Original *string `json:"original"`
	}
	if b, err := os.ReadFile(file); err == nil {
		v := string(b)
		diff.Modified = &v
	}
	dir := filepath.Dir(file)
	if top, err := gitOutput(dir, "rev-parse", "--show-toplevel"); err == nil {
		if rel, err := filepath.Rel(strings.TrimSpace(top), file); err == nil {
			if v, err := gitOutput(dir, "show", "HEAD:"+filepath.ToSlash(rel)); err == nil {
				diff.Original = &v
			}
		}
	}
	writeJSON(w, http.StatusOK, diff)
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	return string(out), err
}

func (s *Server) fileUpload(w http.ResponseWriter, r *http.Request, _ string) {
	p := r.URL.Query().Get("path")
	if !filepath.IsAbs(p) {
		writeDetail(w, http.StatusBadRequest, "Path must be absolute")
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "file"}, Msg: "Field required", Input: nil})
		return
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		writeDetail(w, http.StatusInternalServerError, "Failed to upload file: "+err.Error())
		return
	}
	out, err := os.Create(p)
	if err == nil {
		_, err = io.Copy(out, f)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		writeDetail(w, http.StatusInternalServerError, "Failed to upload file: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) fileDownload(w http.ResponseWriter, r *http.Request, _ string) {
	p := r.URL.Query().Get("path")
	if !filepath.IsAbs(p) {
		writeDetail(w, http.StatusBadRequest, "Path must be absolute")
		return
	}
	st, err := os.Stat(p)
	if err != nil {
		writeDetail(w, http.StatusNotFound, "File not found")
		return
	}
	if !st.Mode().IsRegular() {
		writeDetail(w, http.StatusBadRequest, "Path is not a file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+filepath.Base(p)+`"`)
	http.ServeFile(w, r, p)
}
