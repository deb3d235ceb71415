package proxy

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestPlanModeChildConversation: issue 28 acceptance 6, plan mode. A
// create with parent_conversation_id makes a child conversation of ohd's
// on the folder it names (its inner server is not told of a parent it
// cannot know); the child's answers carry parent_conversation_id, the
// parent's list it in sub_conversation_ids, and deleting the parent
// deletes the child first.
func TestPlanModeChildConversation(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	parent, child := store.NewID(), store.NewID()
	create := func(body string) (*http.Response, []byte) {
		return p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(body))
	}
	if resp, b := create(`{"workspace":{"working_dir":"` + fake.root + `"},"conversation_id":"` + parent + `"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create the parent = %d %s", resp.StatusCode, b)
	}
	resp, b := create(`{"workspace":{"working_dir":"` + fake.root + `"},"conversation_id":"` + child + `","parent_conversation_id":"` + strings.ToUpper(parent) + `"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create the child = %d %s", resp.StatusCode, b)
	}
	type info struct {
		ID     string    `json:"id"`
		Parent *string   `json:"parent_conversation_id"`
		Subs   *[]string `json:"sub_conversation_ids"`
	}
	if got := decode[info](t, b); got.Parent == nil || *got.Parent != parent {
		t.Errorf("the child's 201 = %s, want parent_conversation_id %s", b, parent)
	}
	// The inner server got no parent it does not know.
	fake.mu.Lock()
	req := fake.reqs[len(fake.reqs)-1]
	fake.mu.Unlock()
	if req.Workspace != fake.root || !strings.Contains(string(req.Request), `"parent_conversation_id":"`+parent+`"`) {
		t.Errorf("the child's create request = %+v %s, want the parent's folder and the parent kept in the record", req.Workspace, req.Request)
	}
	_, b = p.do(t, "GET", "/api/conversations/"+parent, outerKeys[0], nil)
	if got := decode[info](t, b); got.Subs == nil || !slices.Equal(*got.Subs, []string{child}) {
		t.Errorf("GET parent = %s, want sub_conversation_ids [%s]", b, child)
	}
	_, b = p.do(t, "GET", "/api/conversations/"+child, outerKeys[0], nil)
	if got := decode[info](t, b); got.Parent == nil || *got.Parent != parent || got.Subs == nil || len(*got.Subs) != 0 {
		t.Errorf("GET child = %s, want parent_conversation_id %s and no sub-conversations", b, parent)
	}
	_, b = p.do(t, "GET", "/api/conversations/search", outerKeys[0], nil)
	var page struct{ Items []info }
	_ = json.Unmarshal(b, &page)
	for _, it := range page.Items {
		if it.ID == parent && (it.Subs == nil || !slices.Equal(*it.Subs, []string{child})) {
			t.Errorf("search: the parent's sub_conversation_ids = %v", it.Subs)
		}
	}
	if resp, b := p.do(t, "DELETE", "/api/conversations/"+parent, outerKeys[0], nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE parent = %d %s", resp.StatusCode, b)
	}
	calls := fake.called("remove ")
	if len(calls) != 2 || calls[0] != "remove "+child || calls[1] != "remove "+parent {
		t.Errorf("DELETE parent removed %v, want the child, then the parent", calls)
	}
	if resp, _ := p.do(t, "GET", "/api/conversations/"+child, outerKeys[0], nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET child after its parent's delete = %d, want 404", resp.StatusCode)
	}
}

// TestPlainFolderAgentToldNoGit: issue 28. In a folder that is not a git
// repository the agent cannot use git; its system message says so.
func TestPlainFolderAgentToldNoGit(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := store.NewID()
	body := `{"workspace":{"working_dir":"` + fake.root + `"},"conversation_id":"` + id + `","agent":{"kind":"Agent","agent_context":{"system_message_suffix":"be brief"}}}`
	if resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(body)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create = %d %s", resp.StatusCode, b)
	}
	_, b := p.do(t, "GET", "/api/conversations/"+id+"/standin/create_body", outerKeys[0], nil)
	var got struct {
		Agent struct {
			AgentContext struct {
				Suffix string `json:"system_message_suffix"`
			} `json:"agent_context"`
		} `json:"agent"`
	}
	_ = json.Unmarshal(b, &got)
	want := "be brief\n\n" + openhands.PlainFolderGuidance(fake.root)
	if got.Agent.AgentContext.Suffix != want {
		t.Errorf("the inner create's system_message_suffix = %q, want %q", got.Agent.AgentContext.Suffix, want)
	}
}
