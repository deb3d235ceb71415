package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Execution statuses, as the agent server's ConversationExecutionStatus.
const (
	statusIdle     = "idle"
	statusRunning  = "running"
	statusPaused   = "paused"
	statusWaiting  = "waiting_for_confirmation"
	statusFinished = "finished"
	statusError    = "error"
	statusStuck    = "stuck"
	statusDeleting = "deleting"
)

var validStatus = map[string]bool{
	statusIdle: true, statusRunning: true, statusPaused: true, statusWaiting: true,
	statusFinished: true, statusError: true, statusStuck: true, statusDeleting: true,
}

// maxJSONBody bounds the JSON request bodies the standin decodes.
const maxJSONBody = 1 << 20

// ConversationInfo is the agent server's ConversationInfo, reduced to the
// fields ohd reads, and the agent (base_state.json's, secrets redacted:
// publicAgent) whose skills include_skills trims (skills.go).
type ConversationInfo struct {
	ID              string          `json:"id"`
	Agent           json.RawMessage `json:"agent,omitempty"`
	Workspace       Workspace       `json:"workspace"`
	ExecutionStatus string          `json:"execution_status"`
	Title           *string         `json:"title"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	// ForkedFromConversationID and ForkedFromEventID are a fork's links
	// (models.py StoredConversation; fork.go), null otherwise.
	ForkedFromConversationID *string `json:"forked_from_conversation_id"`
	ForkedFromEventID        *string `json:"forked_from_event_id"`
}

// Workspace is the agent server's LocalWorkspace.
type Workspace struct {
	Kind       string `json:"kind"`
	WorkingDir string `json:"working_dir"`
}

// errBadUUID is returned by parseUUID for anything that is not a UUID.
var errBadUUID = errors.New("not a valid UUID")

// parseUUID accepts the forms the agent server's UUID validation accepts
// (32 hex digits, hyphenated 8-4-4-4-12, in braces, or with a "urn:uuid:"
// prefix, any case) and returns the canonical hyphenated lower-case form.
func parseUUID(s string) (string, error) {
	t := s
	if rest, ok := strings.CutPrefix(strings.ToLower(t), "urn:uuid:"); ok {
		t = rest
	} else if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && len(t) >= 2 {
		t = t[1 : len(t)-1]
	}
	var digits string
	switch len(t) {
	case 32:
		digits = t
	case 36:
		if t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
			return "", errBadUUID
		}
		digits = t[:8] + t[9:13] + t[14:18] + t[19:23] + t[24:]
	default:
		return "", errBadUUID
	}
	b, err := hex.DecodeString(digits)
	if err != nil || len(b) != 16 {
		return "", errBadUUID
	}
	return formatUUID(b), nil
}

func formatUUID(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b[:])
}

// uuidError is FastAPI's validation entry for a malformed UUID at loc.
func uuidError(input string, loc ...any) validationError {
	return validationError{
		Type:  "uuid_parsing",
		Loc:   loc,
		Msg:   "Input should be a valid UUID",
		Input: input,
	}
}

// pathID parses the {id} path value, answering 422 itself when malformed.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	raw := r.PathValue("id")
	id, err := parseUUID(raw)
	if err != nil {
		writeValidation(w, uuidError(raw, "path", "conversation_id"))
		return "", false
	}
	return id, true
}

// startRequest is the part of the agent server's StartConversationRequest
// the standin reads; other fields are accepted and ignored.
type startRequest struct {
	// StandinReject, a test knob, makes the create fail with this status
	// (so tests can see ohd undo everything after an inner 4xx).
	StandinReject int `json:"standin_reject"`
	// StandinHold, a test knob, holds the create this long (a Go
	// duration) before answering, or until the caller gives up, so tests
	// can disconnect or time out in the middle of a forwarded create.
	StandinHold string `json:"standin_hold"`
	// StandinCrash, a test knob, makes the server process exit (status
	// 3, as STANDIN_EXIT_AFTER does) on receiving the create, so tests
	// can see ohd undo a create whose inner server died under it.
	StandinCrash   bool                       `json:"standin_crash"`
	ConversationID *string                    `json:"conversation_id"`
	Agent          json.RawMessage            `json:"agent"`
	Secrets        map[string]json.RawMessage `json:"secrets"`
	Workspace      *struct {
		WorkingDir *string `json:"working_dir"`
	} `json:"workspace"`
}

func (s *Server) startConversation(w http.ResponseWriter, r *http.Request) {
	include, ok := includeSkills(w, r)
	if !ok {
		return
	}
	var req startRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeValidation(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: err.Error(), Input: nil})
		return
	}
	if req.Workspace == nil || req.Workspace.WorkingDir == nil || *req.Workspace.WorkingDir == "" {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "workspace", "working_dir"}, Msg: "Field required", Input: nil})
		return
	}
	if req.StandinCrash {
		s.log.Error("standin: simulated crash on create (standin_crash)")
		os.Exit(exitCrash)
	}
	if req.StandinHold != "" {
		d, err := time.ParseDuration(req.StandinHold)
		if err != nil {
			writeDetail(w, http.StatusBadRequest, "standin_hold: "+err.Error())
			return
		}
		s.log.Info("standin: holding the create (standin_hold)", "for", d)
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			s.log.Info("standin: the caller of the held create went away")
			return
		}
	}
	if req.StandinReject >= 400 && req.StandinReject < 600 {
		writeDetail(w, req.StandinReject, "rejected on request (standin_reject)")
		return
	}
	agent, err := loadSkills(req.Agent)
	if err != nil {
		writeValidation(w, validationError{Type: "value_error", Loc: []any{"body", "agent", "agent_context", "skills"}, Msg: err.Error(), Input: nil})
		return
	}
	dir := *req.Workspace.WorkingDir
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		writeDetail(w, http.StatusBadRequest, fmt.Sprintf("working_dir %s is not a directory in this container", dir))
		return
	}
	id := newUUID()
	if req.ConversationID != nil && *req.ConversationID != "" {
		var err error
		if id, err = parseUUID(*req.ConversationID); err != nil {
			writeValidation(w, uuidError(*req.ConversationID, "body", "conversation_id"))
			return
		}
	}
	now := time.Now().UTC()
	c, isNew, err := s.convs.create(ConversationInfo{
		ID:              id,
		Workspace:       Workspace{Kind: "LocalWorkspace", WorkingDir: dir},
		ExecutionStatus: statusIdle,
		CreatedAt:       now,
		UpdatedAt:       now,
	}, agent, req.Secrets)
	if err != nil {
		s.log.Error("persist conversation", "id", id, "err", err)
		writeDetail(w, http.StatusInternalServerError, "cannot persist the conversation")
		return
	}
	code := http.StatusOK
	if isNew {
		code = http.StatusCreated
	}
	writeJSON(w, code, shown(c, include))
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	include, ok := includeSkills(w, r)
	if !ok {
		return
	}
	c, found := s.convs.get(id)
	if !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, shown(c, include))
}

// maxBatchIDs mirrors the agent server's "assert len(ids) < 100".
const maxBatchIDs = 99

func (s *Server) batchGetConversations(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query()["ids"]
	if len(raw) == 0 {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"query", "ids"}, Msg: "Field required", Input: nil})
		return
	}
	if len(raw) > maxBatchIDs {
		writeValidation(w, validationError{Type: "too_long", Loc: []any{"query", "ids"}, Msg: fmt.Sprintf("List should have at most %d items", maxBatchIDs), Input: nil})
		return
	}
	include, ok := includeSkills(w, r)
	if !ok {
		return
	}
	var bad []validationError
	out := make([]*ConversationInfo, len(raw))
	for i, v := range raw {
		id, err := parseUUID(v)
		if err != nil {
			bad = append(bad, uuidError(v, "query", "ids", i))
			continue
		}
		if c, ok := s.convs.get(id); ok {
			c = shown(c, include)
			out[i] = &c
		}
	}
	if len(bad) > 0 {
		writeValidation(w, bad...)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// statusQuery reads ?status=, answering 422 itself when unknown.
func statusQuery(w http.ResponseWriter, r *http.Request) (string, bool) {
	v := r.URL.Query().Get("status")
	if v != "" && !validStatus[v] {
		writeValidation(w, validationError{Type: "enum", Loc: []any{"query", "status"}, Msg: "Input should be a valid ConversationExecutionStatus", Input: v})
		return "", false
	}
	return v, true
}

func (s *Server) countConversations(w http.ResponseWriter, r *http.Request) {
	status, ok := statusQuery(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, len(s.convs.list(status)))
}

// conversationPage is the agent server's ConversationPage.
type conversationPage struct {
	Items      []ConversationInfo `json:"items"`
	NextPageID *string            `json:"next_page_id"`
}

func (s *Server) searchConversations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status, ok := statusQuery(w, r)
	if !ok {
		return
	}
	include, ok := includeSkills(w, r)
	if !ok {
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 100 {
			writeValidation(w, validationError{Type: "less_than_equal", Loc: []any{"query", "limit"}, Msg: "Input should be an integer greater than 0 and at most 100", Input: v})
			return
		}
		limit = n
	}
	offset := 0
	if v := q.Get("page_id"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeValidation(w, validationError{Type: "value_error", Loc: []any{"query", "page_id"}, Msg: "page_id must be a next_page_id from a previous page", Input: v})
			return
		}
		offset = n
	}
	items := s.convs.list(status) // creation order
	switch order := q.Get("sort_order"); order {
	case "", "CREATED_AT_DESC":
		slices.Reverse(items)
	case "CREATED_AT":
	case "UPDATED_AT", "UPDATED_AT_DESC":
		slices.SortStableFunc(items, func(a, b ConversationInfo) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
		if order == "UPDATED_AT_DESC" {
			slices.Reverse(items)
		}
	default:
		writeValidation(w, validationError{Type: "enum", Loc: []any{"query", "sort_order"}, Msg: "Input should be 'CREATED_AT', 'CREATED_AT_DESC', 'UPDATED_AT' or 'UPDATED_AT_DESC'", Input: order})
		return
	}
	page := conversationPage{Items: []ConversationInfo{}}
	if offset < len(items) {
		end := min(offset+limit, len(items))
		for _, c := range items[offset:end] {
			page.Items = append(page.Items, shown(c, include))
		}
		if end < len(items) {
			next := strconv.Itoa(end)
			page.NextPageID = &next
		}
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if ok, err := s.convs.delete(id); err != nil {
		writeDetail(w, http.StatusInternalServerError, "cannot delete the conversation's files")
		return
	} else if !ok {
		// The agent server answers 400 (not 404) when nothing was deleted.
		writeDetail(w, http.StatusBadRequest, "Bad Request")
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// setStatus returns the handler of run and pause, which only move the
// conversation's execution_status (so count and search filters can be
// tested).
func (s *Server) setStatus(status string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r)
		if !ok {
			return
		}
		if ok, err := s.convs.setStatus(id, status); err != nil {
			writeDetail(w, http.StatusInternalServerError, "cannot persist the conversation")
			return
		} else if !ok {
			writeDetail(w, http.StatusNotFound, "Not Found")
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"success": true})
	}
}

// knownConversation reports whether the WebSocket route serves id.
func (s *Server) knownConversation(id string) bool {
	if s.cfg.AnyID || (s.cfg.ConversationID != "" && id == s.cfg.ConversationID) {
		return true
	}
	_, ok := s.convs.get(id)
	return ok
}

// decodeJSON decodes r's body (at most maxJSONBody bytes, one JSON value)
// into v.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty body: want a JSON object")
		}
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

// secretReport is the standin's GET /api/conversations/{id}/standin/secrets:
// per secret name, whether the server can read it under its present
// cipher and the SHA-256 of the value (never the value).
func (s *Server) secretReport(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	rep, found := s.convs.secretReport(id)
	if !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// messageEvent is the agent server's MessageEvent for a user message,
// reduced to what the standin persists.
type messageEvent struct {
	Kind       string          `json:"kind"`
	ID         string          `json:"id"`
	Timestamp  string          `json:"timestamp"`
	Source     string          `json:"source"`
	LLMMessage json.RawMessage `json:"llm_message"`
}

// inboundMessage is the agent server's Message as a client sends it (POST
// .../events, or a frame on the sockets: reference §7).
type inboundMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// addMessage persists msg as the next event of id and returns it.
func (s *Server) addMessage(id string, msg inboundMessage) (json.RawMessage, int, bool, error) {
	ev := messageEvent{Kind: "MessageEvent", ID: newUUID(), Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000000"), Source: msg.Role}
	ev.LLMMessage, _ = json.Marshal(msg)
	raw, _ := json.Marshal(ev)
	seq, found, err := s.convs.appendEvent(id, raw, ev.ID)
	return raw, seq, found, err
}

// sendMessage is POST /api/conversations/{id}/events: {"role","content",
// "run"?} → {"success": true}.
func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var msg inboundMessage
	if err := decodeJSON(w, r, &msg); err != nil || msg.Role == "" {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "role"}, Msg: "Field required"})
		return
	}
	_, _, found, err := s.addMessage(id, msg)
	switch {
	case err != nil:
		writeDetail(w, http.StatusInternalServerError, "cannot persist the event")
	case !found:
		writeDetail(w, http.StatusNotFound, "Not Found")
	default:
		writeJSON(w, http.StatusOK, map[string]bool{"success": true})
	}
}

// searchEvents is GET /api/conversations/{id}/events/search: every event,
// oldest first, as {"items": [...], "next_page_id": null}.
func (s *Server) searchEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	evs, found := s.convs.eventsAndSubscribe(id, nil)
	if !found {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	if evs == nil {
		evs = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": evs, "next_page_id": nil})
}
