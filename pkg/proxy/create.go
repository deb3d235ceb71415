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
	"path/filepath"
	"slices"
	"strings"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// createBody is a parsed StartConversationRequest: every field as sent,
// and the few ohd reads.
type createBody struct {
	fields     map[string]json.RawMessage
	workspace  map[string]json.RawMessage
	WorkingDir string // workspace.working_dir: a host path
	Worktree   bool   // worktree
	ID         string // conversation_id, canonical; "" if absent
	Parent     string // parent_conversation_id (plan mode's child), canonical
	// launched is the launched_agent_profile of a body that named an
	// agent profile, once resolved (resolveProfiles).
	launched json.RawMessage
}

// parseCreateBody parses a create body. It checks only what ohd needs:
// a JSON object, workspace.working_dir a non-empty string, worktree a
// boolean, conversation_id a UUID; the inner server validates the rest.
// The errors are FastAPI validation entries (answered with 422).
func parseCreateBody(b []byte) (*createBody, []validationError) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		msg := "Input should be a JSON object"
		if err != nil {
			msg = "JSON decode error: " + err.Error()
		}
		return nil, []validationError{{Type: "json_invalid", Loc: []any{"body"}, Msg: msg, Input: nil}}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, []validationError{{Type: "json_invalid", Loc: []any{"body"}, Msg: "JSON decode error: more than one JSON value", Input: nil}}
	}
	cb := &createBody{fields: fields}
	var errs []validationError
	ws, ok := fields["workspace"]
	if !ok || isNull(ws) {
		errs = append(errs, validationError{Type: "missing", Loc: []any{"body", "workspace"}, Msg: "Field required", Input: nil})
	} else if err := json.Unmarshal(ws, &cb.workspace); err != nil || cb.workspace == nil {
		errs = append(errs, validationError{Type: "model_type", Loc: []any{"body", "workspace"}, Msg: "Input should be an object", Input: nil})
	} else {
		wd, ok := cb.workspace["working_dir"]
		if !ok || isNull(wd) {
			errs = append(errs, validationError{Type: "missing", Loc: []any{"body", "workspace", "working_dir"}, Msg: "Field required", Input: nil})
		} else if err := json.Unmarshal(wd, &cb.WorkingDir); err != nil || cb.WorkingDir == "" {
			errs = append(errs, validationError{Type: "string_type", Loc: []any{"body", "workspace", "working_dir"}, Msg: "Input should be a non-empty string", Input: nil})
		}
	}
	if v, ok := fields["worktree"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &cb.Worktree); err != nil {
			errs = append(errs, validationError{Type: "bool_type", Loc: []any{"body", "worktree"}, Msg: "Input should be a valid boolean", Input: nil})
		}
	}
	if v, ok := fields["conversation_id"]; ok && !isNull(v) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			errs = append(errs, uuidError("", "body", "conversation_id"))
		} else if cb.ID, ok = parseID(s); !ok {
			errs = append(errs, uuidError(s, "body", "conversation_id"))
		}
	}
	if v, ok := fields["parent_conversation_id"]; ok && !isNull(v) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			errs = append(errs, uuidError("", "body", "parent_conversation_id"))
		} else if cb.Parent, ok = parseID(s); !ok {
			errs = append(errs, uuidError(s, "body", "parent_conversation_id"))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cb, nil
}

func isNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}

// rewrite returns the body to forward to the inner server: every field as
// sent, except workspace.working_dir (the conversation's working directory,
// the worktree when there is one, which has the same path in the
// container), conversation_id (the conversation's id) and worktree
// (removed: the inner server must not create a worktree of its own).
//
// With a worktree, the agent server's own worktree guidance is added to
// the agent's system message (openhands.WorktreeGuidance), as the server
// does when it makes the worktree itself.
func (cb *createBody) rewrite(c store.Conversation) ([]byte, error) {
	id, workingDir := c.ID, c.WorkingDir
	out := make(map[string]json.RawMessage, len(cb.fields)+1)
	for k, v := range cb.fields {
		out[k] = v
	}
	switch {
	case c.Worktree != "":
		openhands.AppendSystemMessageSuffix(out, openhands.WorktreeGuidance(c.Workspace, c.Worktree, c.WorkingDir, c.Branch))
	case c.Runtime != "" && c.Runtime != "local" && c.Repo == "" && !c.InPlace:
		// A plain folder: the agent is told git is not available (issue 28).
		openhands.AppendSystemMessageSuffix(out, openhands.PlainFolderGuidance(c.WorkingDir))
	}
	ws := make(map[string]json.RawMessage, len(cb.workspace))
	for k, v := range cb.workspace {
		ws[k] = v
	}
	ws["working_dir"] = jsonString(workingDir)
	wsb, err := marshal(ws)
	if err != nil {
		return nil, err
	}
	out["workspace"] = wsb
	out["conversation_id"] = jsonString(id)
	delete(out, "worktree")
	// The parent runs in another container: its server would refuse a
	// parent it does not know. ohd keeps the link (family.go).
	delete(out, "parent_conversation_id")
	return marshal(out)
}

// recordedFields are the create body's fields ohd keeps in its record
// (CreateRequest.Request): none of them holds a secret. The agent, its
// LLM settings, secrets, MCP and hook configuration stay with the inner
// server.
var recordedFields = []string{"max_iterations", "stuck_detection", "tags", "autotitle", "title_llm_profile"}

// record returns the secret-free copy of the request kept in ohd's
// record: the fields ohd acted on, a few harmless settings, and the names
// (only) of the other fields.
func (cb *createBody) record(id string) json.RawMessage {
	rec := map[string]any{
		"conversation_id": id,
		"workspace":       map[string]string{"working_dir": cb.WorkingDir},
		"worktree":        cb.Worktree,
	}
	if cb.Parent != "" {
		rec["parent_conversation_id"] = cb.Parent
	}
	var other []string
	for k, v := range cb.fields {
		switch {
		case slices.Contains(recordedFields, k):
			rec[k] = v
		case k == "workspace" || k == "worktree" || k == "conversation_id" || k == "parent_conversation_id":
		default:
			other = append(other, k)
		}
	}
	slices.Sort(other)
	if len(other) > 0 {
		rec["other_fields"] = other
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil
	}
	return b
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// marshal encodes v without HTML escaping, so forwarded values keep their
// bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// innerAnswer is the inner server's answer to a forwarded create.
type innerAnswer struct {
	status      int
	contentType string
	body        []byte
}

// innerRejected is the forward step's error when the inner server
// answered the create with a non-2xx status.
type innerRejected struct{ innerAnswer }

func (e *innerRejected) Error() string {
	return fmt.Sprintf("the conversation's agent server refused the create with status %d", e.status)
}

// errInnerUnreachable is the forward step's error when the inner server
// could not be reached or its answer could not be read.
var errInnerUnreachable = errors.New("the conversation's agent server did not answer the create")

// create answers POST /api/conversations; see the package documentation.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	skills, include, ok := skillsParam(w, r)
	if !ok {
		return
	}
	if r.ContentLength > s.opts.MaxBody {
		writeTooLarge(w, s.opts.MaxBody)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeTooLarge(w, s.opts.MaxBody)
			return
		}
		writeDetail(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	cb, verrs := parseCreateBody(body)
	if verrs != nil {
		writeValidation(w, verrs...)
		return
	}
	if cb.Parent != "" {
		// Plan mode (family.go): the parent must be one of ohd's; the
		// agent server answers an invalid parent 422 (ref §8).
		if _, ok := s.visible(cb.Parent); !ok || cb.Parent == cb.ID {
			writeDetail(w, http.StatusUnprocessableEntity, "parent_conversation_id "+cb.Parent+": no such conversation (a child conversation's parent must exist)")
			return
		}
	}
	if !filepath.IsAbs(cb.WorkingDir) {
		writeJSON(w, http.StatusBadRequest, errorBody{
			Detail: fmt.Sprintf("workspace.working_dir %q is not an absolute path: ohd needs the absolute path of a directory on its host", cb.WorkingDir),
			Step:   "validate",
		})
		return
	}
	id := cb.ID
	if id == "" {
		id = store.NewID()
	} else if c, ok := s.visible(id); ok {
		// A retried create: the agent server answers 200 with the existing
		// conversation and ignores the rest of the body (reference §8,
		// conversation_service.py L1308-1437).
		it := &item{conv: c, query: skills, include: include}
		s.fill(r.Context(), []*item{it})
		b, source := it.json()
		w.Header().Set("X-Ohd-Conversation-Id", c.ID)
		w.Header().Set("X-Ohd-Source", source)
		setEgressHeader(w.Header(), c)
		writeRaw(w, http.StatusOK, b)
		return
	}
	// Canvas's isolated mode (ref §10) sends working_dir /workspace, the
	// container path of the agent server's docker runtime: ohd gives the
	// conversation a fresh folder of its own instead (isolatedWorkspace).
	if iso, ok, msg := s.isolatedWorkspace(r, cb.WorkingDir, id); ok {
		cb.WorkingDir = iso
	} else if msg != "" {
		writeJSON(w, http.StatusBadRequest, errorBody{Detail: msg, Step: "validate"})
		return
	}
	// Secret mediation (DESIGN §7): no credential of the body reaches
	// the container. Profiles first: agent_profile_id becomes
	// agent_settings, which is then mediated like Canvas's own.
	title, err := s.resolveProfiles(r.Context(), s.mediator(r), cb, id)
	var extra []openhands.LLM
	if err == nil && title != nil && title.key != nil {
		extra = append(extra, *title.key)
	}
	var keep func(context.Context, string) (store.Grants, error)
	if err == nil {
		keep, err = s.mediateCreate(r.Context(), r, cb, id, extra...)
	}
	if err != nil {
		if !writeMediationError(w, err) {
			s.createError(w, id, &conversation.StepError{Step: "mediate", Err: err})
		}
		return
	}
	var answer *innerAnswer
	req := conversation.CreateRequest{
		ID:        id,
		Workspace: filepath.Clean(cb.WorkingDir),
		Worktree:  cb.Worktree,
		Prepare:   keep,
		Request:   cb.record(id),
		// The inner server never sees the profile: ohd keeps and shows
		// its launched_agent_profile.
		LaunchedAgentProfile: cb.launched,
		// A missing working_dir is made as the agent server makes it,
		// under the roots the operator allows (workdir.go).
		MakeWorkspace:  true,
		WorkspaceRoots: s.workspaceRoots(r, filepath.Clean(cb.WorkingDir)),
		Forward: func(ctx context.Context, c store.Conversation, t conversation.Target) error {
			if t.Addr == "" {
				return nil // local runtime: no inner server
			}
			fwd, err := cb.rewrite(c)
			if err != nil {
				return fmt.Errorf("encode the create body: %w", err)
			}
			if title != nil {
				// The inner server resolves title_llm_profile from its own
				// store when it makes the title.
				if err := s.saveInnerProfile(ctx, t, title.name, title.llm); err != nil {
					return err
				}
			}
			a, err := s.postCreate(ctx, c.ID, t, fwd, skills)
			if err != nil {
				return err
			}
			if a.status < 200 || a.status > 299 {
				return &innerRejected{*a}
			}
			answer = a
			return nil
		},
	}
	c, err := s.conv.Create(r.Context(), req)
	if err != nil {
		s.createError(w, id, err)
		return
	}
	h := w.Header()
	h.Set("X-Ohd-Conversation-Id", c.ID)
	setEgressHeader(h, c)
	if c.Worktree != "" {
		h.Set("X-Ohd-Worktree", c.Worktree)
		h.Set("X-Ohd-Branch", c.Branch)
	}
	for _, n := range c.Notes {
		h.Add("X-Ohd-Note", strings.Map(printableASCII, scrubLoopback(n)))
	}
	if answer == nil {
		b, _ := json.Marshal(render(c))
		h.Set("X-Ohd-Source", "ohd")
		writeRaw(w, http.StatusCreated, b)
		return
	}
	h.Set("X-Ohd-Source", "inner")
	h.Set("Content-Type", answer.contentType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(answer.status)
	// The agent server's 201 carries launched_agent_profile when an
	// agent profile launched the conversation (ref §10); the inner server
	// got agent_settings instead, so ohd adds it.
	var children []string
	if cb.Parent != "" {
		children = []string{}
	}
	_, _ = w.Write(withFamily(openhands.WithLaunchedProfile(answer.body, cb.launched), cb.Parent, children))
}

// skillsParam reads the client's include_skills (the agent server trims
// skills unless it is true: reference §5, "Metadata reads";
// openhands.IncludeSkills), answering 422 itself for a value the server
// refuses. query passes it on to the inner server: "?include_skills=<v>"
// with the value the server reads (the last), or "".
func skillsParam(w http.ResponseWriter, r *http.Request) (query string, include, ok bool) {
	v := r.URL.Query()[openhands.IncludeSkillsParam]
	include, err := openhands.IncludeSkills(v)
	if err != nil {
		writeValidation(w, validationError{Type: "bool_parsing", Loc: []any{"query", openhands.IncludeSkillsParam}, Msg: "Input should be a valid boolean, unable to interpret input", Input: v[len(v)-1]})
		return "", false, false
	}
	if len(v) == 0 {
		return "", false, true
	}
	return "?" + url.Values{openhands.IncludeSkillsParam: v[len(v)-1:]}.Encode(), include, true
}

func printableASCII(r rune) rune {
	if r < 0x20 || r > 0x7e {
		return '?'
	}
	return r
}

// postCreate forwards the create body to the inner server.
func (s *Server) postCreate(ctx context.Context, id string, t conversation.Target, body []byte, query string) (*innerAnswer, error) {
	req, err := http.NewRequestWithContext(withTarget(ctx, t), http.MethodPost, "http://"+t.Addr+"/api/conversations"+query, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInnerUnreachable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Session-API-Key", string(t.InnerKey))
	// A create's target has no namespace dialer yet (the conversation's
	// first request opens it): do not leave a published-port connection
	// in the pool for that first request to take.
	req.Close = t.Dial == nil
	resp, err := s.client.Do(req)
	if err != nil {
		s.log.Warn("conversation API: forwarding a create failed", "id", id, "err", err)
		return nil, errInnerUnreachable
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, s.opts.MaxBody+1))
	if err != nil || int64(len(b)) > s.opts.MaxBody {
		s.log.Warn("conversation API: reading the inner create answer failed", "id", id, "err", err, "bytes", len(b))
		return nil, errInnerUnreachable
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	return &innerAnswer{status: resp.StatusCode, contentType: ct, body: b}, nil
}

// createError answers a failed create; the body names the failed step.
func (s *Server) createError(w http.ResponseWriter, id string, err error) {
	step := "validate"
	var se *conversation.StepError
	if errors.As(err, &se) {
		step = se.Step
	}
	w.Header().Set("X-Ohd-Failed-Step", step)
	if _, exists := s.visible(id); !exists {
		// A failed create is undone (or was refused before any record):
		// no conversation has that id, and a client must not be sent
		// looking for one (issue 28: 409 and 503 answers named one).
		id = ""
	}
	var rej *innerRejected
	if errors.As(err, &rej) {
		code := rej.status
		if code < 400 || code > 599 {
			code = http.StatusBadGateway
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(rejectedBody(rej, id))
		return
	}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, conversation.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, conversation.ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, conversation.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errInnerUnreachable):
		code = http.StatusBadGateway
	case step == "image" || step == "container":
		code = http.StatusServiceUnavailable
	}
	if code >= 500 {
		s.log.Warn("conversation API: create failed", "id", id, "step", step, "err", err)
	}
	writeJSON(w, code, errorBody{Detail: scrubLoopback(err.Error()), Step: step, ConversationID: id})
}

// rejectedBody is the inner server's error body, scrubbed of loopback
// addresses, with "step" and "conversation_id" added when it is a JSON
// object (else wrapped in {"detail": ...}).
func rejectedBody(rej *innerRejected, id string) []byte {
	body := []byte(scrubLoopback(string(rej.body)))
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) == nil && obj != nil {
		obj["step"] = jsonString("forward")
		if id != "" {
			obj["conversation_id"] = jsonString(id)
		}
		if b, err := marshal(obj); err == nil {
			return append(b, '\n')
		}
	}
	detail := strings.TrimSpace(string(body))
	if len(detail) > 4096 {
		detail = detail[:4096] + "..."
	}
	if detail == "" {
		detail = http.StatusText(rej.status)
	}
	b, _ := json.Marshal(errorBody{Detail: "the conversation's agent server refused the create: " + detail, Step: "forward", ConversationID: id})
	return append(b, '\n')
}
