package proxy

import (
	"context"
	"encoding/json"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Plan mode (ref §10): Agent Canvas creates a child conversation with
// parent_conversation_id, on its parent's working directory; the agent
// server lists it in the parent's sub_conversation_ids and deletes it
// with the parent. Under ohd the child is a conversation of its own (its
// own container and view; on the parent's folder it shares the folder,
// as any in-place conversations on one folder do), and its inner server
// knows nothing of the parent, which runs in another container: ohd
// keeps the link in the child's record (CreateRequest.Request's
// parent_conversation_id), forwards the create without it, and adds
// parent_conversation_id and sub_conversation_ids to the conversations'
// answers itself. A DELETE of the parent deletes its children first.

// parentOf is the parent recorded for c, or "".
func parentOf(c store.Conversation) string {
	if len(c.Request) == 0 {
		return ""
	}
	var r struct {
		Parent string `json:"parent_conversation_id"`
	}
	if json.Unmarshal(c.Request, &r) != nil {
		return ""
	}
	return r.Parent
}

// childrenOf returns the visible conversations whose parent is id, oldest
// first.
func (s *Server) childrenOf(id string) []string {
	out := []string{}
	for _, c := range s.visibleList() {
		if parentOf(c) == id {
			out = append(out, c.ID)
		}
	}
	return out
}

// setFamily records, for each item, its parent and its children.
func (s *Server) setFamily(items []*item) {
	children := map[string][]string{}
	for _, c := range s.visibleList() {
		if p := parentOf(c); p != "" {
			children[p] = append(children[p], c.ID)
		}
	}
	for _, it := range items {
		if it == nil {
			continue
		}
		it.parent = parentOf(it.conv)
		it.children = children[it.conv.ID]
		if it.children == nil {
			it.children = []string{}
		}
	}
}

// withFamily returns info (a ConversationInfo) with parent_conversation_id
// (when parent is set) and sub_conversation_ids set to ohd's.
func withFamily(info json.RawMessage, parent string, children []string) json.RawMessage {
	if parent == "" && children == nil {
		return info
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(info, &m) != nil || m == nil {
		return info
	}
	if parent != "" {
		m["parent_conversation_id"] = jsonString(parent)
	}
	if children != nil {
		m["sub_conversation_ids"] = mustJSON(children)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return info
	}
	return out
}

// removeChildren removes the children of conversation id (plan mode's
// planners) before it, as the agent server deletes them with their parent.
// A child that cannot be removed is left, and logged.
func (s *Server) removeChildren(ctx context.Context, id string) {
	for _, child := range s.childrenOf(id) {
		s.removeChildren(ctx, child)
		if _, err := s.conv.Remove(ctx, child, conversation.RemoveOptions{}); err != nil {
			s.log.Warn("conversation API: removing a child with its parent failed", "id", child, "parent", id, "err", err)
		}
	}
}
