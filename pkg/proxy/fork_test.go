package proxy

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestForkRoute: POST /{id}/fork as the agent server takes it (ref §10).
// Bad bodies, an unknown source and an id in use are refused as the
// server refuses them, before anything is made; a fork asks the source's
// own server to fork under the new id, creates the new conversation on
// the source's folder with ForkOf set (its worktree from the source's
// published commit when the source has one), records the fork's links,
// and has the source's server forget the fork.
func TestForkRoute(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	src := p.create(t, map[string]any{"worktree": true})
	fake.mu.Lock()
	fake.convs[src].rec.Published = "0123456789abcdef0123456789abcdef01234567"
	srcInner := fake.convs[src].inner
	fake.mu.Unlock()
	fork := func(id, body string) (*http.Response, []byte) {
		return p.do(t, "POST", "/api/conversations/"+id+"/fork", outerKeys[0], strings.NewReader(body))
	}
	for _, c := range []struct {
		id, body string
		status   int
		detail   string
	}{
		{src, `[]`, 422, "dictionary"},
		{src, `{"id":"nope"}`, 422, "uuid_parsing"},
		{src, `{"title":"` + strings.Repeat("x", 201) + `"}`, 422, "string_too_long"},
		{src, `{"reset_metrics":"maybe"}`, 422, "bool_type"},
		{src, `{"tags":["a"]}`, 422, "dict_type"},
		{src, `{"id":"` + src + `"}`, 409, "already exists"},
		{store.NewID(), `{}`, 404, "Source conversation not found"},
		{src, `{"from_event_id":"no-such-event"}`, 404, "from_event_id"},
	} {
		if resp, b := fork(c.id, c.body); resp.StatusCode != c.status || !strings.Contains(string(b), c.detail) {
			t.Errorf("fork %s %s = %d %s, want %d naming %q", c.id, c.body, resp.StatusCode, b, c.status, c.detail)
		}
	}
	if n := len(fake.called("create ")); n != 1 {
		t.Fatalf("refused forks created conversations: %v", fake.called("create"))
	}
	if resp, _ := p.do(t, "GET", "/api/conversations/"+src+"/fork", outerKeys[0], nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET .../fork = %d, want 405", resp.StatusCode)
	}

	child := store.NewID()
	resp, b := fork(src, `{"id":"`+strings.ToUpper(child)+`","title":"branch","unknown":1}`)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Ohd-Conversation-Id") != child {
		t.Fatalf("fork = %d %s (conversation %q), want 201 for %s", resp.StatusCode, b, resp.Header.Get("X-Ohd-Conversation-Id"), child)
	}
	fake.mu.Lock()
	req := fake.reqs[len(fake.reqs)-1]
	fake.mu.Unlock()
	if req.ID != child || req.ForkOf != src || !req.Worktree || req.StartPoint != "0123456789abcdef0123456789abcdef01234567" || req.Workspace != fake.root {
		t.Errorf("the fork's create request = id %s fork of %q worktree %v start %q workspace %s; want a worktree of the source's folder from its published commit",
			req.ID, req.ForkOf, req.Worktree, req.StartPoint, req.Workspace)
	}
	if !strings.Contains(string(req.Request), `"forked_from_conversation_id":"`+src+`"`) || !strings.Contains(string(req.Request), `"conversation_id":"`+child+`"`) {
		t.Errorf("the fork's record = %s, want its id and its source", req.Request)
	}
	// The source's server forgot the fork once it was moved.
	if st := innerStatus(t, srcInner, child); st != http.StatusNotFound {
		t.Errorf("the source's server still has the fork: GET = %d", st)
	}
	// A fork an earlier attempt left with the source's server (ohd
	// stopped before moving it) does not block a retry with its id.
	left := store.NewID()
	if st := innerPost(t, srcInner, "/api/conversations/"+src+"/fork", `{"id":"`+left+`"}`); st != http.StatusCreated {
		t.Fatalf("leave a fork with the source's server: %d", st)
	}
	if resp, b := fork(src, `{"id":"`+left+`"}`); resp.StatusCode != http.StatusCreated {
		t.Errorf("retrying a fork the source's server still held = %d %s, want 201", resp.StatusCode, b)
	}
	// A fork whose create fails (its container does not start) is the
	// create's error, names no conversation, and the source's server
	// forgets it too.
	failed := store.NewID()
	fake.mu.Lock()
	fake.createErr = &conversation.StepError{ID: failed, Step: "container", Err: errors.New("engine down")}
	fake.mu.Unlock()
	resp, b = fork(src, `{"id":"`+failed+`"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Ohd-Failed-Step") != "container" || strings.Contains(string(b), "conversation_id") {
		t.Errorf("failed fork = %d %s (step %q), want 503 naming the step and no conversation_id", resp.StatusCode, b, resp.Header.Get("X-Ohd-Failed-Step"))
	}
	if st := innerStatus(t, srcInner, failed); st != http.StatusNotFound {
		t.Errorf("the source's server kept a failed fork: GET = %d", st)
	}
}

// innerStatus is the status of GET /api/conversations/{id} on a stand-in.
func innerStatus(t *testing.T, in *standin, id string) int {
	t.Helper()
	r, err := http.NewRequest("GET", "http://"+in.addr+"/api/conversations/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Session-API-Key", string(in.key))
	got, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	return got.StatusCode
}

// innerPost posts body to a stand-in and returns the status.
func innerPost(t *testing.T, in *standin, path, body string) int {
	t.Helper()
	r, err := http.NewRequest("POST", "http://"+in.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Session-API-Key", string(in.key))
	r.Header.Set("Content-Type", "application/json")
	got, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	return got.StatusCode
}

// TestSweepForksRemovesWhatAnInterruptedForkLeft: ohd stopped between the
// source's server writing a fork and the move leaves the fork with that
// server for good (a random id is never retried). SweepForks, run at
// start, has it forget every such fork, keeps the source's own
// conversation, and leaves a fork in flight alone.
func TestSweepForksRemovesWhatAnInterruptedForkLeft(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	src := p.create(t, map[string]any{})
	fake.mu.Lock()
	srcInner := fake.convs[src].inner
	fake.mu.Unlock()
	left, inFlight := store.NewID(), store.NewID()
	for _, id := range []string{left, inFlight} {
		if st := innerPost(t, srcInner, "/api/conversations/"+src+"/fork", `{"id":"`+id+`"}`); st != http.StatusCreated {
			t.Fatalf("leave fork %s with the source's server: %d", id, st)
		}
	}
	release := p.holdFork(inFlight)
	p.SweepForks(t.Context())
	if st := innerStatus(t, srcInner, left); st != http.StatusNotFound {
		t.Errorf("the source's server still holds the fork an interrupted fork left: GET = %d", st)
	}
	if st := innerStatus(t, srcInner, inFlight); st != http.StatusOK {
		t.Errorf("the sweep removed a fork in flight: GET = %d", st)
	}
	if st := innerStatus(t, srcInner, src); st != http.StatusOK {
		t.Errorf("the sweep removed the source's own conversation: GET = %d", st)
	}
	release()
	p.SweepForks(t.Context())
	if st := innerStatus(t, srcInner, inFlight); st != http.StatusNotFound {
		t.Errorf("once no longer in flight, the fork stays: GET = %d", st)
	}
}
