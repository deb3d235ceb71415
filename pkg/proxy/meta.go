package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// executionStatuses are the agent server's ConversationExecutionStatus
// values, accepted by ?status=.
var executionStatuses = []string{
	"idle", "running", "paused", "waiting_for_confirmation", "finished", "error", "stuck", "deleting",
}

// visibleState reports whether the conversation API shows conversations
// in state st. A conversation being provisioned is not created yet (its
// create has not answered); a failed or deleted one no longer exists.
func visibleState(st store.State) bool {
	return st == store.StateRunning || st == store.StateStopped
}

// visible returns the record of id if the API shows it.
func (s *Server) visible(id string) (store.Conversation, bool) {
	c, err := s.conv.Get(id)
	if err != nil || c.ID != id || !visibleState(c.State) {
		return store.Conversation{}, false
	}
	return c, true
}

func (s *Server) visibleList() []store.Conversation {
	return slices.DeleteFunc(s.conv.List(), func(c store.Conversation) bool { return !visibleState(c.State) })
}

// fallbackStatus is the execution_status ohd reports for a conversation
// whose inner server it does not ask (stopped) or that does not answer:
// "idle", since no agent step can run without its container, and the
// next request starts it again.
const fallbackStatus = "idle"

// conversationInfo is the agent server's ConversationInfo as ohd renders
// it from its own record, with ohd's view in "ohd". It lacks the fields
// only the inner server knows (agent, stats, ...).
type conversationInfo struct {
	ID              string            `json:"id"`
	Workspace       workspaceInfo     `json:"workspace"`
	ExecutionStatus string            `json:"execution_status"`
	Title           *string           `json:"title"`
	Tags            map[string]string `json:"tags"`
	CreatedAt       time.Time         `json:"created_at"`
	UpdatedAt       time.Time         `json:"updated_at"`
	// LaunchedAgentProfile is null unless an agent profile launched it.
	LaunchedAgentProfile json.RawMessage `json:"launched_agent_profile"`
	OHD                  ohdInfo         `json:"ohd"`
}

type workspaceInfo struct {
	Kind       string `json:"kind"`
	WorkingDir string `json:"working_dir"`
}

// ohdInfo is ohd's own view of a conversation.
type ohdInfo struct {
	State     store.State `json:"state"`
	Workspace string      `json:"workspace"`
	Worktree  string      `json:"worktree,omitempty"`
	Branch    string      `json:"branch,omitempty"`
	Notes     []string    `json:"notes,omitempty"`
	// Egress is the container's egress mode: broker or open (DESIGN §5).
	Egress string `json:"egress,omitempty"`
}

func render(c store.Conversation) conversationInfo {
	return conversationInfo{
		ID:                   c.ID,
		Workspace:            workspaceInfo{Kind: "LocalWorkspace", WorkingDir: c.WorkingDir},
		ExecutionStatus:      fallbackStatus,
		Tags:                 map[string]string{},
		CreatedAt:            c.CreatedAt,
		UpdatedAt:            c.UpdatedAt,
		LaunchedAgentProfile: orNull(c.LaunchedAgentProfile),
		OHD: ohdInfo{
			State: c.State, Workspace: c.Workspace, Worktree: c.Worktree, Branch: c.Branch,
			Notes: scrubNotes(c.Notes), Egress: c.Egress,
		},
	}
}

func scrubNotes(notes []string) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		out[i] = scrubLoopback(n)
	}
	return out
}

// item is one conversation of an answer: the inner server's
// ConversationInfo when it gave one, else ohd's rendering.
type item struct {
	conv   store.Conversation
	inner  json.RawMessage
	source string // "inner" (its server answered) or "host" (its files)
	query  string // passed on to the inner server (include_skills)
	// include keeps the skills of an answer from the host files (the
	// inner server trims its own: openhands.TrimSkills).
	include bool
	status  string
	filled  bool
	// parent and children are plan mode's links (family.go), set by fill.
	parent   string
	children []string
}

func (it *item) json() ([]byte, string) {
	if it.inner != nil {
		return withFamily(openhands.WithLaunchedProfile(it.inner, it.conv.LaunchedAgentProfile), it.parent, it.children), it.source
	}
	b, _ := json.Marshal(render(it.conv))
	return withFamily(b, it.parent, it.children), "ohd"
}

// metadataConcurrency bounds the inner reads of one list answer.
const metadataConcurrency = 8

// fill asks the inner server of every running conversation among items
// for its ConversationInfo, a few at a time. Stopped conversations are
// not started for it, and any failure leaves ohd's rendering.
func (s *Server) fill(ctx context.Context, items []*item) {
	s.setFamily(items)
	sem := make(chan struct{}, metadataConcurrency)
	var wg sync.WaitGroup
	for _, it := range items {
		if it == nil || it.filled {
			continue
		}
		it.filled, it.status = true, fallbackStatus
		if it.conv.State != store.StateRunning {
			s.hostInfo(it)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if raw, status, ok := s.innerInfo(ctx, it.conv.ID, it.query); ok {
				it.inner, it.status, it.source = raw, status, "inner"
			} else {
				s.hostInfo(it)
			}
		}()
	}
	wg.Wait()
}

// hostInfo fills it from the inner server's state on the host, as the
// agent server's docker runtime answers while no container runs
// (reference §5 "Metadata reads"): meta.json and base_state.json, with
// the real execution_status.
func (s *Server) hostInfo(it *item) {
	raw, err := s.conv.InnerInfo(it.conv.ID)
	if err != nil {
		return
	}
	if !it.include {
		raw = openhands.TrimSkills(raw)
	}
	it.inner, it.source = raw, "host"
	if st := openhands.Status(raw); st != "" {
		it.status = st
	}
	if it.conv.State != store.StateRunning {
		// No container runs it: never a live status (a container that
		// died mid-run left "running" in its files).
		if cold := openhands.ColdStatus(it.status); cold != it.status {
			it.status = cold
			it.inner = openhands.WithStatus(it.inner, cold)
		}
	}
}

// innerInfo asks a running conversation's inner server for its
// ConversationInfo.
func (s *Server) innerInfo(ctx context.Context, id, query string) (json.RawMessage, string, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.t.Metadata)
	defer cancel()
	if c, err := s.conv.Get(id); err != nil || c.State != store.StateRunning {
		return nil, "", false // stopped meanwhile: do not start it
	}
	t, err := s.conv.Target(ctx, id)
	if err != nil || t.Addr == "" {
		return nil, "", false
	}
	req, err := http.NewRequestWithContext(withTarget(ctx, t), http.MethodGet, "http://"+t.Addr+conversationsPrefix+id+query, nil)
	if err != nil {
		return nil, "", false
	}
	req.Header.Set("X-Session-API-Key", string(t.InnerKey))
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		s.log.Debug("conversation API: inner metadata read failed", "id", id, "err", err)
		return nil, "", false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", false
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, s.opts.MaxBody+1))
	if err != nil || int64(len(raw)) > s.opts.MaxBody {
		return nil, "", false
	}
	var probe struct {
		ID              string `json:"id"`
		ExecutionStatus string `json:"execution_status"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, "", false
	}
	if got, ok := parseID(probe.ID); !ok || got != id {
		return nil, "", false
	}
	if probe.ExecutionStatus == "" {
		probe.ExecutionStatus = fallbackStatus
	}
	return bytes.TrimSpace(raw), probe.ExecutionStatus, true
}

func uuidError(input string, loc ...any) validationError {
	return validationError{Type: "uuid_parsing", Loc: loc, Msg: "Input should be a valid UUID", Input: input}
}

// pathID parses the {id} path value, answering 422 itself when malformed.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	raw := r.PathValue("id")
	id, ok := parseID(raw)
	if !ok {
		writeValidation(w, uuidError(raw, "path", "conversation_id"))
	}
	return id, ok
}

// get answers GET /api/conversations/{id}: the inner server's answer when
// the conversation runs, else ohd's last known info. It never starts a
// stopped conversation (a metadata read must not wake an idle container)
// and does not count as activity for the idle timer.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	skills, include, ok := skillsParam(w, r)
	if !ok {
		return
	}
	c, ok := s.visible(id)
	if !ok {
		writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+id)
		return
	}
	it := &item{conv: c, query: skills, include: include}
	s.fill(r.Context(), []*item{it})
	b, source := it.json()
	w.Header().Set("X-Ohd-Source", source)
	setEgressHeader(w.Header(), c)
	writeRaw(w, http.StatusOK, b)
}

// setEgressHeader says the container's egress mode (broker or open) in
// X-Ohd-Egress, also on answers that are the inner server's own.
func setEgressHeader(h http.Header, c store.Conversation) {
	mode, upgraded := c.EgressMode()
	if mode != "" {
		h.Set("X-Ohd-Egress", mode)
	}
	if upgraded {
		h.Add("X-Ohd-Note", "egress open: "+store.UpgradedEgressNote)
	}
}

func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// maxBatchIDs mirrors the agent server's limit (fewer than 100 ids).
const maxBatchIDs = 99

// batchGet answers GET /api/conversations?ids=A&ids=B: an array in the
// order asked, null for an unknown id.
func (s *Server) batchGet(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query()["ids"]
	if len(raw) == 0 {
		writeValidation(w, validationError{Type: "missing", Loc: []any{"query", "ids"}, Msg: "Field required", Input: nil})
		return
	}
	if len(raw) > maxBatchIDs {
		writeValidation(w, validationError{Type: "too_long", Loc: []any{"query", "ids"}, Msg: fmt.Sprintf("List should have at most %d items", maxBatchIDs), Input: nil})
		return
	}
	skills, include, ok := skillsParam(w, r)
	if !ok {
		return
	}
	var bad []validationError
	items := make([]*item, len(raw))
	for i, v := range raw {
		id, ok := parseID(v)
		if !ok {
			bad = append(bad, uuidError(v, "query", "ids", i))
			continue
		}
		if c, ok := s.visible(id); ok {
			items[i] = &item{conv: c, query: skills, include: include}
		}
	}
	if len(bad) > 0 {
		writeValidation(w, bad...)
		return
	}
	s.fill(r.Context(), items)
	writeRaw(w, http.StatusOK, jsonArray(items))
}

func jsonArray(items []*item) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		if it == nil {
			buf.WriteString("null")
			continue
		}
		b, _ := it.json()
		buf.Write(b)
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

// statusParam reads ?status=, answering 422 itself when unknown.
func statusParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	v := r.URL.Query().Get("status")
	if v != "" && !slices.Contains(executionStatuses, v) {
		writeValidation(w, validationError{Type: "enum", Loc: []any{"query", "status"}, Msg: "Input should be 'idle', 'running', 'paused', 'waiting_for_confirmation', 'finished', 'error', 'stuck' or 'deleting'", Input: v})
		return "", false
	}
	return v, true
}

func itemsOf(list []store.Conversation, query string, include bool) []*item {
	items := make([]*item, len(list))
	for i, c := range list {
		items[i] = &item{conv: c, query: query, include: include}
	}
	return items
}

// count answers GET /api/conversations/count with a bare JSON integer.
func (s *Server) count(w http.ResponseWriter, r *http.Request) {
	status, ok := statusParam(w, r)
	if !ok {
		return
	}
	list := s.visibleList()
	if status == "" {
		writeJSON(w, http.StatusOK, len(list))
		return
	}
	items := itemsOf(list, "", false) // count has no include_skills; only statuses are read
	s.fill(r.Context(), items)
	n := 0
	for _, it := range items {
		if it.status == status {
			n++
		}
	}
	writeJSON(w, http.StatusOK, n)
}

// sortOrders are the agent server's ConversationSortOrder values.
var sortOrders = []string{"CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC"}

// search answers GET /api/conversations/search with
// {"items": [...], "next_page_id": string|null}.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status, ok := statusParam(w, r)
	if !ok {
		return
	}
	skills, include, ok := skillsParam(w, r)
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
	order := q.Get("sort_order")
	if order == "" {
		order = "CREATED_AT_DESC"
	}
	if !slices.Contains(sortOrders, order) {
		writeValidation(w, validationError{Type: "enum", Loc: []any{"query", "sort_order"}, Msg: "Input should be 'CREATED_AT', 'CREATED_AT_DESC', 'UPDATED_AT' or 'UPDATED_AT_DESC'", Input: order})
		return
	}
	list := s.visibleList()
	slices.SortStableFunc(list, func(a, b store.Conversation) int {
		var c int
		if order == "UPDATED_AT" || order == "UPDATED_AT_DESC" {
			c = a.UpdatedAt.Compare(b.UpdatedAt)
		} else {
			c = a.CreatedAt.Compare(b.CreatedAt)
		}
		if c == 0 {
			c = compareStrings(a.ID, b.ID)
		}
		if order == "CREATED_AT_DESC" || order == "UPDATED_AT_DESC" {
			c = -c
		}
		return c
	})
	items := itemsOf(list, skills, include)
	if status != "" {
		s.fill(r.Context(), items)
		items = slices.DeleteFunc(items, func(it *item) bool { return it.status != status })
	}
	var page []*item
	var next *string
	if offset < len(items) {
		end := min(offset+limit, len(items))
		page = items[offset:end]
		if end < len(items) {
			n := strconv.Itoa(end)
			next = &n
		}
	}
	s.fill(r.Context(), page)
	var buf bytes.Buffer
	buf.WriteString(`{"items":`)
	buf.Write(jsonArray(page))
	buf.WriteString(`,"next_page_id":`)
	nb, _ := json.Marshal(next)
	buf.Write(nb)
	buf.WriteByte('}')
	writeRaw(w, http.StatusOK, buf.Bytes())
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// removeTimeout bounds a DELETE's teardown; it runs to its end even if the
// client goes away, so a removal is never left half done.
const removeTimeout = 5 * time.Minute

// remove answers DELETE /api/conversations/{id}: ohd removes the
// conversation (container, broker, snapshot and worktree, identity) and
// answers {"success": true}, with "ohd" saying what was kept of the work.
func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if _, ok := s.visible(id); !ok {
		// The agent server answers an unknown id 400 with FastAPI's
		// default detail (conversation_router.py L270-281; ref §8); the
		// hint says what was wrong.
		w.Header().Set("X-Ohd-Hint", "no conversation "+id+": ohctl ls --all lists the conversations")
		writeJSON(w, http.StatusBadRequest, errorBody{Detail: "Bad Request"})
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), removeTimeout)
	defer cancel()
	s.removeChildren(ctx, id) // plan mode's planners go with their parent (family.go)
	c, err := s.conv.Remove(ctx, id, conversation.RemoveOptions{})
	if err != nil {
		switch {
		case errors.Is(err, conversation.ErrNotFound):
			writeJSON(w, http.StatusBadRequest, errorBody{Detail: "Bad Request"})
		case errors.Is(err, conversation.ErrInvalid):
			writeDetail(w, http.StatusBadRequest, err.Error())
		case errors.Is(err, conversation.ErrConflict):
			writeDetail(w, http.StatusConflict, err.Error())
		default:
			s.log.Warn("conversation API: remove failed", "id", id, "err", err)
			writeDetail(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	type kept struct {
		SnapshotRef  string   `json:"snapshot_ref,omitempty"`
		Branch       string   `json:"branch,omitempty"`
		Kept         []string `json:"kept,omitempty"`
		IgnoredFiles int      `json:"ignored_files,omitempty"`
		IgnoredBytes int64    `json:"ignored_bytes,omitempty"`
		Message      string   `json:"message,omitempty"`
	}
	resp := struct {
		Success bool  `json:"success"`
		OHD     *kept `json:"ohd,omitempty"`
	}{Success: true}
	if rm := c.Removal; rm != nil && (rm.BranchKept || rm.SnapshotRef != "" || len(rm.Kept) > 0 || rm.IgnoredFiles > 0) {
		resp.OHD = &kept{SnapshotRef: rm.SnapshotRef, Kept: rm.Kept, IgnoredFiles: rm.IgnoredFiles, IgnoredBytes: rm.IgnoredBytes, Message: rm.Message}
		if rm.BranchKept {
			resp.OHD.Branch = c.Branch
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// orNull is v, or JSON null when v is empty.
func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}
