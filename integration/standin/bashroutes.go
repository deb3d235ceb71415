package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The agent server's bash HTTP routes (bash_router.py @v1.43.1, under
// /api/bash), on the same files as the socket (bash.go). ohd forwards them
// with ?cid= (or a conversation's scoped route) to the conversation's
// container.
//
//	POST   /api/bash/start_bash_command     ExecuteBashRequest -> the BashCommand (L100-108)
//	POST   /api/bash/execute_bash_command   ExecuteBashRequest -> its last BashOutput, after it ends (L111-122)
//	GET    /api/bash/bash_events/search     {"items","next_page_id"}: kind__eq, command_id__eq, order__gt,
//	                                        sort_order TIMESTAMP|TIMESTAMP_DESC, page_id, limit 1..100 (L34-72)
//	GET    /api/bash/bash_events/{event_id} the event whose file name ends _<event_id>; 404 (L75-86)
//	DELETE /api/bash/bash_events            {"cleared_count": n} (L125-130)
//
// Each fails with the unhandled-exception 500 when the events directory
// cannot be made (bash.go).

// Each is also served under /api/conversations/{id}/bash/ (runtime.go's
// scoped form), where a command's default cwd is the conversation's
// working_dir.
func (s *Server) bashRoutes(m *http.ServeMux) {
	for _, p := range []string{"/api", "/api/conversations/{id}"} {
		m.HandleFunc("POST "+p+"/bash/start_bash_command", s.scoped(s.bashStart(false)))
		m.HandleFunc("POST "+p+"/bash/execute_bash_command", s.scoped(s.bashStart(true)))
		m.HandleFunc("GET "+p+"/bash/bash_events/search", s.bashSearch)
		m.HandleFunc("GET "+p+"/bash/bash_events/{event_id}", s.bashGet)
		m.HandleFunc("DELETE "+p+"/bash/bash_events", s.bashClear)
	}
}

// writeUnhandled is api.py's _unhandled_exception_handler (L579-636).
func writeUnhandled(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusInternalServerError, map[string]string{
		"detail": "Internal Server Error", "exception": err.Error(), "error_id": strings.ReplaceAll(newUUID(), "-", ""),
	})
}

func (s *Server) bashStart(wait bool) func(w http.ResponseWriter, r *http.Request, workingDir string) {
	return func(w http.ResponseWriter, r *http.Request, workingDir string) {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var m map[string]json.RawMessage
		if err != nil || json.Unmarshal(raw, &m) != nil || m == nil {
			writeValidation(w, validationError{Type: "model_attributes_type", Loc: []any{"body"}, Msg: "Input should be a valid dictionary or object to extract fields from"})
			return
		}
		cmd, err := parseBashRequest(m)
		if err != nil {
			writeValidation(w, validationError{Type: "missing", Loc: []any{"body"}, Msg: err.Error()})
			return
		}
		if cmd.Cwd == nil && workingDir != "" {
			cmd.Cwd = &workingDir
		}
		done, err := s.startBash(cmd)
		if err != nil {
			writeUnhandled(w, err)
			return
		}
		if !wait {
			writeJSON(w, http.StatusOK, cmd)
			return
		}
		select {
		case <-done:
		case <-r.Context().Done():
			return
		}
		items, _, err := s.bashSearchFiles("BashOutput", strings.ReplaceAll(cmd.ID, "-", ""), false, "", 100)
		if err != nil {
			writeUnhandled(w, err)
			return
		}
		if len(items) == 0 {
			writeUnhandled(w, errNoOutput)
			return
		}
		writeJSON(w, http.StatusOK, items[len(items)-1])
	}
}

var errNoOutput = pyOSError{"IndexError", "list index out of range"}

// bashSearchFiles is _search_bash_events_sync: the file names filtered on
// their kind and command id segments, sorted, paged by name.
func (s *Server) bashSearchFiles(kind, commandHex string, desc bool, pageID string, limit int) ([]map[string]any, *string, error) {
	names, err := s.bash.names()
	if err != nil {
		return nil, nil, err
	}
	var matched []string
	for _, n := range names {
		parts := strings.Split(n, "_")
		if kind != "" && (len(parts) < 2 || parts[1] != kind) {
			continue
		}
		if commandHex != "" && (len(parts) < 4 || parts[2] != commandHex) {
			continue
		}
		matched = append(matched, n)
	}
	if desc {
		for i, j := 0, len(matched)-1; i < j; i, j = i+1, j-1 {
			matched[i], matched[j] = matched[j], matched[i]
		}
	}
	start := 0
	for i, n := range matched {
		if pageID != "" && n == pageID {
			start = i
			break
		}
	}
	end := min(start+limit, len(matched))
	var next *string
	if end < len(matched) {
		next = &matched[end]
	}
	items := []map[string]any{}
	for _, n := range matched[start:end] {
		if ev := s.bash.load(n); ev != nil {
			items = append(items, ev)
		}
	}
	return items, next, nil
}

func (s *Server) bashSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := q.Get("kind__eq")
	if kind != "" && kind != "BashCommand" && kind != "BashOutput" {
		writeValidation(w, validationError{Type: "literal_error", Loc: []any{"query", "kind__eq"}, Msg: "Input should be 'BashCommand' or 'BashOutput'"})
		return
	}
	cmdHex := ""
	if v := q.Get("command_id__eq"); v != "" {
		id, err := parseUUID(v)
		if err != nil {
			writeValidation(w, validationError{Type: "uuid_parsing", Loc: []any{"query", "command_id__eq"}, Msg: "Input should be a valid UUID"})
			return
		}
		cmdHex = strings.ReplaceAll(id, "-", "")
	}
	desc := false
	switch q.Get("sort_order") {
	case "", "TIMESTAMP":
	case "TIMESTAMP_DESC":
		desc = true
	default:
		writeValidation(w, validationError{Type: "enum", Loc: []any{"query", "sort_order"}, Msg: "Input should be 'TIMESTAMP' or 'TIMESTAMP_DESC'"})
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 100 {
			writeValidation(w, validationError{Type: "less_than_equal", Loc: []any{"query", "limit"}, Msg: "Input should be greater than 0 and at most 100"})
			return
		}
		limit = n
	}
	items, next, err := s.bashSearchFiles(kind, cmdHex, desc, q.Get("page_id"), limit)
	if err != nil {
		writeUnhandled(w, err)
		return
	}
	if v := q.Get("order__gt"); v != "" {
		gt, err := strconv.Atoi(v)
		if err != nil {
			writeValidation(w, validationError{Type: "int_parsing", Loc: []any{"query", "order__gt"}, Msg: "Input should be a valid integer"})
			return
		}
		kept := items[:0]
		for _, ev := range items {
			if o, ok := ev["order"].(float64); ok && int(o) <= gt {
				continue
			}
			kept = append(kept, ev)
		}
		items = kept
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "next_page_id": next})
}

func (s *Server) bashGet(w http.ResponseWriter, r *http.Request) {
	names, err := s.bash.names()
	if err != nil {
		writeUnhandled(w, err)
		return
	}
	suffix := "_" + r.PathValue("event_id")
	for _, n := range names {
		if strings.HasSuffix(n, suffix) {
			if ev := s.bash.load(n); ev != nil {
				writeJSON(w, http.StatusOK, ev)
				return
			}
		}
	}
	writeDetail(w, http.StatusNotFound, "Not Found")
}

func (s *Server) bashClear(w http.ResponseWriter, r *http.Request) {
	names, err := s.bash.names()
	if err != nil {
		writeUnhandled(w, err)
		return
	}
	n := 0
	for _, name := range names {
		if os.Remove(filepath.Join(s.bash.dir, name)) == nil {
			n++
		}
	}
	writeJSON(w, http.StatusOK, map[string]int{"cleared_count": n})
}
