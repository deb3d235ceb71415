package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// forkRequest is the agent server's ForkConversationRequest (models.py).
type forkRequest struct {
	ID           *string           `json:"id"`
	Title        *string           `json:"title"`
	Tags         map[string]string `json:"tags"`
	ResetMetrics *bool             `json:"reset_metrics"`
	FromEventID  *string           `json:"from_event_id"`
}

// forkConversation serves POST /api/conversations/{id}/fork as the agent
// server does (conversation_router.py fork_conversation,
// LocalConversation.fork): a new conversation, idle, holding the source's
// events up to and including from_event_id (all without it), its agent
// and secrets, title the request's, with forked_from_conversation_id and
// forked_from_event_id; 201 with its ConversationInfo. An unknown source
// or from_event_id is 404, an id in use 409.
func (s *Server) forkConversation(w http.ResponseWriter, r *http.Request) {
	src, ok := pathID(w, r)
	if !ok {
		return
	}
	include, ok := includeSkills(w, r)
	if !ok {
		return
	}
	var req forkRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			writeValidation(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: err.Error(), Input: nil})
			return
		}
	}
	id := newUUID()
	if req.ID != nil {
		var err error
		if id, err = parseUUID(*req.ID); err != nil {
			writeValidation(w, uuidError(*req.ID, "body", "id"))
			return
		}
	}
	c, code, msg := s.convs.fork(src, id, req)
	if code != http.StatusCreated {
		writeDetail(w, code, msg)
		return
	}
	writeJSON(w, http.StatusCreated, shown(c, include))
}

// fork copies conversation src into a new conversation id; see
// forkConversation. It returns the new one, or a status and detail.
func (st *store) fork(src, id string, req forkRequest) (ConversationInfo, int, string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.byID[id]; ok {
		return ConversationInfo{}, http.StatusConflict, "Conversation with id " + id + " already exists"
	}
	from, ok := st.served(src)
	if !ok {
		return ConversationInfo{}, http.StatusNotFound, "Source conversation not found"
	}
	events := from.events
	if req.FromEventID != nil {
		n := -1
		for i, ev := range from.events {
			var e struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(ev, &e) == nil && e.ID == *req.FromEventID {
				n = i
				break
			}
		}
		if n < 0 {
			return ConversationInfo{}, http.StatusNotFound, "Unknown from_event_id: " + *req.FromEventID
		}
		events = from.events[:n+1]
	}
	now := time.Now().UTC()
	info := from.info
	srcID := src
	info.ID, info.Title, info.ExecutionStatus, info.CreatedAt, info.UpdatedAt = id, req.Title, statusIdle, now, now
	info.ForkedFromConversationID, info.ForkedFromEventID = &srcID, req.FromEventID
	rec := &record{info: info, agent: from.agent, secrets: map[string]json.RawMessage{}}
	for k, v := range from.secrets {
		rec.secrets[k] = v
	}
	dir := filepath.Join(st.convDir(id), "events")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ConversationInfo{}, http.StatusInternalServerError, err.Error()
	}
	for i, ev := range events {
		var e struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(ev, &e)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("event-%05d-%s.json", i, e.ID)), ev, 0o600); err != nil {
			return ConversationInfo{}, http.StatusInternalServerError, err.Error()
		}
		rec.events = append(rec.events, ev)
	}
	if err := st.save(rec); err != nil {
		return ConversationInfo{}, http.StatusInternalServerError, err.Error()
	}
	if st.lease != nil {
		st.lease.claim(st.convDir(id))
	}
	st.byID[id] = rec
	st.order = append(st.order, id)
	return rec.info, http.StatusCreated, ""
}
