package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// "Branch from here" (ref §10; DESIGN §7): POST /api/conversations/{id}/fork
// with the agent server's ForkConversationRequest ({"id", "title", "tags",
// "reset_metrics", "from_event_id"}, every field optional) makes a new ohd
// conversation holding the source's events up to from_event_id, as the
// agent server forks:
//
//  1. the source's own inner server forks it under the new id (its
//     fork_conversation: the events, the agent, the state and metadata,
//     forked_from_conversation_id and forked_from_event_id), and answers
//     as the agent server does when it refuses (404 for an unknown
//     from_event_id, 422 for a bad body);
//  2. ohd creates the new conversation on the source's folder, with the
//     source's folder semantics: a worktree of its own, on a branch of its
//     own starting at the source's published commit, when the source has a
//     worktree; in place on the same folder (shared, as any conversations
//     on one folder are) otherwise. It gets its own container, broker
//     socket and credentials: a copy of the source's own, sealed again
//     under its names (store.CopyScoped), and the source's other grants;
//  3. before its container starts, the fork's files move from the
//     source's inner state to its own (openhands.CopyForkState), renamed
//     for it, and its server loads them at start-up;
//  4. the source's server forgets the fork (its DELETE, which removes only
//     the conversation's directory there).
//
// The answer is 201 with the new conversation's ConversationInfo, from its
// own server. An id that exists answers 409 as the agent server does; an
// unknown source 404 "Source conversation not found".

// isForkTail reports whether an escaped tail is the fork route as the
// inner server routes it.
func isForkTail(escaped string) bool {
	u, err := url.PathUnescape(escaped)
	if err != nil {
		return false
	}
	return path.Clean("/"+u) == "/fork"
}

// forkBody is a parsed ForkConversationRequest.
type forkBody struct {
	fields map[string]json.RawMessage // the known fields as sent (id replaced)
	ID     string
}

// parseForkBody validates a fork body as the agent server's model does
// (an empty body is the default request). Unknown fields are dropped, as
// pydantic ignores them.
func parseForkBody(b []byte) (*forkBody, []validationError) {
	fb := &forkBody{fields: map[string]json.RawMessage{}}
	if len(bytes.TrimSpace(b)) == 0 {
		return fb, nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil || all == nil {
		return nil, []validationError{{Type: "model_attributes_type", Loc: []any{"body"}, Msg: "Input should be a valid dictionary or object to extract fields from", Input: nil}}
	}
	var errs []validationError
	for _, k := range openhands.ForkRequestFields {
		v, ok := all[k]
		if !ok || isNull(v) {
			continue
		}
		fb.fields[k] = v
		switch k {
		case "id":
			var s string
			if json.Unmarshal(v, &s) != nil {
				errs = append(errs, uuidError("", "body", "id"))
			} else if fb.ID, ok = parseID(s); !ok {
				errs = append(errs, uuidError(s, "body", "id"))
			}
		case "title", "from_event_id":
			var s string
			if json.Unmarshal(v, &s) != nil {
				errs = append(errs, validationError{Type: "string_type", Loc: []any{"body", k}, Msg: "Input should be a valid string", Input: nil})
			} else if k == "title" && len([]rune(s)) > openhands.MaxForkTitle {
				errs = append(errs, validationError{Type: "string_too_long", Loc: []any{"body", k}, Msg: fmt.Sprintf("String should have at most %d characters", openhands.MaxForkTitle), Input: s})
			}
		case "tags":
			var m map[string]string
			if json.Unmarshal(v, &m) != nil {
				errs = append(errs, validationError{Type: "dict_type", Loc: []any{"body", k}, Msg: "Input should be a valid dictionary", Input: nil})
			}
		case "reset_metrics":
			var bl bool
			if json.Unmarshal(v, &bl) != nil {
				errs = append(errs, validationError{Type: "bool_type", Loc: []any{"body", k}, Msg: "Input should be a valid boolean", Input: nil})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return fb, nil
}

// forkRecord is the new conversation's record of its request: the
// source's (secret-free) record under the new id, with the fork's links.
func forkRecord(parent store.Conversation, id string, fb *forkBody) json.RawMessage {
	rec := map[string]json.RawMessage{}
	if len(parent.Request) > 0 {
		_ = json.Unmarshal(parent.Request, &rec)
		if rec == nil {
			rec = map[string]json.RawMessage{}
		}
	}
	rec["conversation_id"] = jsonString(id)
	rec["forked_from_conversation_id"] = jsonString(parent.ID)
	if v, ok := fb.fields["from_event_id"]; ok {
		rec["forked_from_event_id"] = v
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil
	}
	return b
}

// fork serves POST /api/conversations/{id}/fork; see above.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, fp forwardPath) {
	skills, include, ok := skillsParam(w, r)
	if !ok {
		return
	}
	parent, ok := s.visible(fp.ID)
	if !ok {
		writeDetail(w, http.StatusNotFound, "Source conversation not found")
		return
	}
	if r.ContentLength > s.opts.MaxBody {
		writeTooLarge(w, s.opts.MaxBody)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		writeTooLarge(w, s.opts.MaxBody)
		return
	}
	fb, verrs := parseForkBody(body)
	if verrs != nil {
		writeValidation(w, verrs...)
		return
	}
	id := fb.ID
	if id == "" {
		id = store.NewID()
	} else if _, exists := s.visible(id); exists {
		writeDetail(w, http.StatusConflict, "Conversation with id "+id+" already exists")
		return
	}
	fb.fields["id"] = jsonString(id)
	fwd, err := marshal(fb.fields)
	if err != nil {
		writeDetail(w, http.StatusInternalServerError, "encode the fork body: "+err.Error())
		return
	}
	t, err := s.conv.Target(r.Context(), parent.ID)
	if err != nil {
		s.targetError(w, parent.ID, err)
		return
	}
	if t.Addr == "" {
		writeDetail(w, http.StatusNotImplemented, "conversation "+parent.ID+" runs in ohd's local runtime: it has no agent server to fork it")
		return
	}
	s.conv.Touch(parent.ID)
	defer s.holdFork(id)()
	if fb.ID != "" {
		// A fork of this id that an earlier attempt left with the source's
		// server (ohd stopped between its fork and the move) would make
		// it answer 409 for ever: it is no conversation of ohd's (checked
		// above), so it goes first.
		if a, err := s.innerCall(r.Context(), t, http.MethodDelete, "/api/conversations/"+id, nil); err == nil && a.status == http.StatusOK {
			s.log.Info("conversation API: removed a fork an earlier attempt left with the source's server", "id", parent.ID, "fork", id)
		}
	}
	a, err := s.innerCall(r.Context(), t, http.MethodPost, "/api/conversations/"+parent.ID+"/fork", fwd)
	if err != nil {
		s.log.Warn("conversation API: forking failed", "id", parent.ID, "err", err)
		writeDetail(w, http.StatusBadGateway, "conversation "+parent.ID+"'s agent server did not answer the fork")
		return
	}
	if a.status < 200 || a.status > 299 {
		// The source's server refused (an unknown from_event_id: 404): its
		// answer, as the agent server gives it.
		w.Header().Set("Content-Type", a.contentType)
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(scrubLoopback(string(a.body))))
		return
	}
	failpoint.Hit("fork/after-inner")
	// The source's server holds the fork only until it is moved.
	defer s.forgetFork(parent.ID, id)
	req := conversation.CreateRequest{
		ID:                   id,
		Workspace:            parent.Workspace,
		Worktree:             parent.Worktree != "",
		Request:              forkRecord(parent, id, fb),
		LaunchedAgentProfile: parent.LaunchedAgentProfile,
		ForkOf:               parent.ID,
	}
	if req.Worktree {
		// Its own branch, from the source's published commit.
		req.StartPoint = parent.Published
		if req.StartPoint == "" {
			req.StartPoint = parent.Branch
		}
	}
	c, err := s.conv.Create(r.Context(), req)
	if err != nil {
		s.createError(w, id, err)
		return
	}
	it := &item{conv: c, query: skills, include: include}
	s.fill(r.Context(), []*item{it})
	b, source := it.json()
	h := w.Header()
	h.Set("X-Ohd-Conversation-Id", c.ID)
	h.Set("X-Ohd-Source", source)
	setEgressHeader(h, c)
	if c.Worktree != "" {
		h.Set("X-Ohd-Worktree", c.Worktree)
		h.Set("X-Ohd-Branch", c.Branch)
	}
	for _, n := range c.Notes {
		h.Add("X-Ohd-Note", printableHeader(n))
	}
	writeRaw(w, http.StatusCreated, b)
}

func printableHeader(s string) string {
	b := []rune(scrubLoopback(s))
	for i, r := range b {
		b[i] = printableASCII(r)
	}
	return string(b)
}

// forgetFork deletes the fork id from the source's inner server once it
// has been moved (or its create failed): the server removes only the
// conversation's directory.
func (s *Server) forgetFork(parent, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := s.conv.Target(ctx, parent)
	if err == nil && t.Addr != "" {
		var a *innerAnswer
		a, err = s.innerCall(ctx, t, http.MethodDelete, "/api/conversations/"+id, nil)
		if err == nil && (a.status < 200 || a.status > 299) {
			err = fmt.Errorf("status %d", a.status)
		}
	}
	if err != nil && !errors.Is(err, conversation.ErrNotFound) {
		s.log.Warn("conversation API: the source's server kept a moved fork", "id", parent, "fork", id, "err", err)
	}
}

// innerCall sends one request to a conversation's inner server with its
// inner key and reads the answer (bounded by MaxBody).
func (s *Server) innerCall(ctx context.Context, t conversation.Target, method, p string, body []byte) (*innerAnswer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(withTarget(ctx, t), method, "http://"+t.Addr+p, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Session-API-Key", string(t.InnerKey))
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, errInnerUnreachable
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, s.opts.MaxBody+1))
	if err != nil || int64(len(b)) > s.opts.MaxBody {
		return nil, errInnerUnreachable
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	return &innerAnswer{status: resp.StatusCode, contentType: ct, body: b}, nil
}

// holdFork marks fork id in flight until the returned function is called:
// SweepForks leaves it with its source's server meanwhile.
func (s *Server) holdFork(id string) func() {
	s.forkMu.Lock()
	defer s.forkMu.Unlock()
	if s.forking == nil {
		s.forking = map[string]int{}
	}
	s.forking[id]++
	return func() {
		s.forkMu.Lock()
		defer s.forkMu.Unlock()
		if s.forking[id]--; s.forking[id] <= 0 {
			delete(s.forking, id)
		}
	}
}

func (s *Server) forkInFlight(id string) bool {
	s.forkMu.Lock()
	defer s.forkMu.Unlock()
	return s.forking[id] > 0
}

// maxSweepPages bounds the pages of one server's conversation list that
// SweepForks reads (100 conversations each; a source's server holds its
// own and, for a moment, the fork being moved).
const maxSweepPages = 10

// SweepForks has every running conversation's inner server forget the
// forks an interrupted fork left with it: a fork is written by the
// source's server under the new id and moved into the new conversation's
// own state, and the source's server is then told to forget it
// (forgetFork); ohd stopped in between leaves the copy there for good,
// loaded by that server and on disk. A source's server holds no
// conversation but its own otherwise, so every other one it lists goes,
// but for forks in flight. Each server gets 30 s; one that does not
// answer is left for the next start. The daemon runs it once its
// conversations are adopted.
func (s *Server) SweepForks(ctx context.Context) {
	for _, c := range s.conv.List() {
		if ctx.Err() != nil {
			return
		}
		if c.State == store.StateRunning {
			s.sweepForksOf(ctx, c.ID)
		}
	}
}

func (s *Server) sweepForksOf(ctx context.Context, parent string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := s.conv.Target(ctx, parent)
	if err != nil || t.Addr == "" {
		return
	}
	var stray []string
	page := ""
	for range maxSweepPages {
		q := "/api/conversations/search?limit=100"
		if page != "" {
			q += "&page_id=" + url.QueryEscape(page)
		}
		a, err := s.innerCall(ctx, t, http.MethodGet, q, nil)
		if err != nil || a.status != http.StatusOK {
			s.log.Debug("fork sweep: the source's server did not list its conversations", "id", parent, "err", err)
			return
		}
		var p struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
			NextPageID *string `json:"next_page_id"`
		}
		if err := json.Unmarshal(a.body, &p); err != nil {
			return
		}
		for _, it := range p.Items {
			id := strings.ToLower(it.ID)
			if store.ValidID(id) && id != parent && !s.forkInFlight(id) {
				stray = append(stray, id)
			}
		}
		if p.NextPageID == nil || *p.NextPageID == "" {
			break
		}
		page = *p.NextPageID
	}
	for _, id := range stray {
		if s.forkInFlight(id) {
			continue
		}
		a, err := s.innerCall(ctx, t, http.MethodDelete, "/api/conversations/"+id, nil)
		if err != nil || a.status < 200 || a.status > 299 {
			s.log.Warn("fork sweep: the source's server kept a fork an interrupted fork left", "id", parent, "fork", id, "err", err)
			continue
		}
		s.log.Info("fork sweep: removed a fork an interrupted fork left with the source's server", "id", parent, "fork", id)
	}
}
