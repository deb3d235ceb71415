package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

func TestCreateRewritesAndForwards(t *testing.T) {
	fake := newFake(t)
	fake.tap = true
	mem := newMemSecrets()
	p := startProxy(t, fake, func(o *Options) { o.Secrets = mem })
	repo := filepath.Join(fake.root, "myrepo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	id := store.NewID()
	body := `{"workspace":{"kind":"LocalWorkspace","working_dir":"` + repo + `"},"worktree":true,` +
		`"conversation_id":"` + strings.ToUpper(id) + `",` +
		`"agent":{"kind":"Agent","llm":{"model":"m","api_key":"sk-very-secret"}},` +
		`"custom_field":{"a":[1,2,{"b":"<&>"}]},"max_iterations":7}`
	resp, rb := p.do(t, "POST", "/api/conversations", outerKeys[1], strings.NewReader(body), "Content-Type", "application/json")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/conversations = %d %s, want 201", resp.StatusCode, rb)
	}
	wantWD := filepath.Join(fake.root, "worktrees", id, "myrepo")
	info := decode[struct {
		ID        string `json:"id"`
		Workspace struct {
			WorkingDir string `json:"working_dir"`
		} `json:"workspace"`
	}](t, rb)
	if info.ID != id || info.Workspace.WorkingDir != wantWD {
		t.Errorf("create answer id=%q working_dir=%q, want %q and %q (the inner server's answer)", info.ID, info.Workspace.WorkingDir, id, wantWD)
	}
	if got := resp.Header.Get("X-Ohd-Worktree"); got != wantWD {
		t.Errorf("X-Ohd-Worktree = %q, want %q", got, wantWD)
	}

	// What the inner server received.
	reqs := fake.tapOf(id).requests()
	if len(reqs) != 1 || reqs[0].method != "POST" || reqs[0].path != "/api/conversations" {
		t.Fatalf("inner server got %d requests (%+v), want one POST /api/conversations", len(reqs), reqs)
	}
	if got := reqs[0].header.Get("X-Session-API-Key"); got != string(fake.innerOf(id).key) {
		t.Errorf("forwarded create carries key %q, want the inner key", got)
	}
	var got, sent map[string]any
	if err := json.Unmarshal(reqs[0].body, &got); err != nil {
		t.Fatalf("forwarded body %s: %v", reqs[0].body, err)
	}
	_ = json.Unmarshal([]byte(body), &sent)
	want := sent
	delete(want, "worktree")
	want["conversation_id"] = id
	want["workspace"] = map[string]any{"kind": "LocalWorkspace", "working_dir": wantWD}
	// The LLM key went to the broker: the inner server gets the relay
	// and a placeholder (secret mediation, TestMediate* for the rest).
	want["agent"] = map[string]any{"kind": "Agent", "llm": map[string]any{"model": "m", "api_key": openhands.PlaceholderKey, "base_url": "http://" + broker.RelayAddr + "/llm/" + id + ".llm"}}
	want["agent"].(map[string]any)["agent_context"] = map[string]any{
		"system_message_suffix": openhands.WorktreeGuidance(repo, wantWD, wantWD, "openhands/"+id),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("forwarded body (-want +got):\n%s", d)
	}
	if !bytes.Contains(reqs[0].body, []byte(`"<&>"`)) {
		t.Errorf("forwarded body %s: value \"<&>\" not kept byte for byte", reqs[0].body)
	}

	// What ohd was asked, and what it keeps.
	cr := fake.createRequests()[0]
	if cr.ID != id || cr.Workspace != repo || !cr.Worktree {
		t.Errorf("CreateRequest = {ID:%q Workspace:%q Worktree:%v}, want {%q %q true}", cr.ID, cr.Workspace, cr.Worktree, id, repo)
	}
	if bytes.Contains(cr.Request, []byte("sk-very-secret")) || bytes.Contains(cr.Request, []byte("api_key")) {
		t.Errorf("CreateRequest.Request = %s: holds the agent's secret", cr.Request)
	}
	if c, _ := fake.Get(id); !cmp.Equal(store.Grants{LLM: []string{id + ".llm"}}, c.Grants) {
		t.Errorf("the conversation's grants (-want +got):\n%s", cmp.Diff(store.Grants{LLM: []string{id + ".llm"}}, c.Grants))
	}
	if v := mem.secret(id + ".llm"); v != "sk-very-secret" {
		t.Errorf("broker secret %s.llm = %q, want the LLM key", id, v)
	}
	rec := decode[map[string]any](t, cr.Request)
	if rec["max_iterations"] != float64(7) || rec["conversation_id"] != id {
		t.Errorf("CreateRequest.Request = %s: want max_iterations 7 and the id", cr.Request)
	}
}

func TestCreateGeneratesID(t *testing.T) {
	fake := newFake(t)
	fake.tap = true
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	if !store.ValidID(id) {
		t.Fatalf("generated id %q is not a canonical UUID", id)
	}
	body := decode[map[string]any](t, fake.tapOf(id).requests()[0].body)
	if body["conversation_id"] != id {
		t.Errorf("forwarded conversation_id = %v, want %q", body["conversation_id"], id)
	}
	if _, ok := body["worktree"]; ok {
		t.Errorf("forwarded body has worktree: %v", body)
	}
}

func TestCreateErrors(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	existing := p.create(t, nil)
	ws := func(dir string) string { return `"workspace":{"working_dir":"` + dir + `"}` }
	tests := []struct {
		name, body string
		code       int
		want       string // in the body
	}{
		{"not json", `{"workspace":`, 422, "json_invalid"},
		{"not an object", `[1,2]`, 422, "json_invalid"},
		{"two values", `{"workspace":{"working_dir":"/"}} {}`, 422, "more than one JSON value"},
		{"no workspace", `{"agent":{}}`, 422, `"loc":["body","workspace"]`},
		{"no working_dir", `{"workspace":{"kind":"LocalWorkspace"}}`, 422, `"loc":["body","workspace","working_dir"]`},
		{"working_dir not a string", `{"workspace":{"working_dir":3}}`, 422, "string_type"},
		{"worktree not a bool", `{` + ws(fake.root) + `,"worktree":"yes"}`, 422, "bool_type"},
		{"bad conversation_id", `{` + ws(fake.root) + `,"conversation_id":"nope"}`, 422, "uuid_parsing"},
		{"relative working_dir", `{` + ws("repo") + `}`, 400, `"step":"validate"`},
		{"working_dir missing on host", `{` + ws(filepath.Join(fake.root, "nowhere")) + `}`, 400, `"step":"validate"`},
		// A retried create: 200 with the existing conversation (reference §8).
		{"existing id", `{` + ws(fake.root) + `,"conversation_id":"` + existing + `"}`, 200, `"id":"` + existing + `"`},
		// Plan mode: a child's parent must exist (the agent server's 422).
		{"unknown parent", `{` + ws(fake.root) + `,"parent_conversation_id":"` + store.NewID() + `"}`, 422, "no such conversation"},
		{"bad parent", `{` + ws(fake.root) + `,"parent_conversation_id":"x"}`, 422, "parent_conversation_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(tc.body))
			if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
				t.Errorf("POST %s = %d %s, want %d with %q", tc.body, resp.StatusCode, b, tc.code, tc.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			// A refusal before any record names no conversation: none
			// exists under any id it could give.
			if tc.code == 400 && strings.Contains(string(b), "conversation_id") {
				t.Errorf("POST %s = %s: a validation refusal carries a conversation id", tc.body, b)
			}
		})
	}
}

func TestCreateInnerRejects(t *testing.T) {
	fake := newFake(t)
	fake.badWorkingDir = true
	p := startProxy(t, fake, nil)
	id := store.NewID()
	body := `{"workspace":{"working_dir":"` + fake.root + `"},"conversation_id":"` + id + `"}`
	resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(body))
	// The stand-in answers 400 when working_dir is not a directory.
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST = %d %s, want the inner server's 400", resp.StatusCode, b)
	}
	got := decode[map[string]any](t, b)
	if _, named := got["conversation_id"]; got["step"] != "forward" || named || !strings.Contains(got["detail"].(string), "is not a directory") {
		t.Errorf("body %s: want the inner detail with step forward and no conversation id (the create is undone: none exists)", b)
	}
	if h := resp.Header.Get("X-Ohd-Failed-Step"); h != "forward" {
		t.Errorf("X-Ohd-Failed-Step = %q, want forward", h)
	}
	if c := fake.called("create-failed " + id); len(c) != 1 {
		t.Errorf("fake Create failures = %v, want one for %s", fake.called("create"), id)
	}
	if resp, b := p.do(t, "GET", "/api/conversations/"+id, outerKeys[0], nil); resp.StatusCode != 404 {
		t.Errorf("GET after failed create = %d %s, want 404", resp.StatusCode, b)
	}
}

func TestCreateInnerDown(t *testing.T) {
	fake := newFake(t)
	fake.innerDown = true
	p := startProxy(t, fake, nil)
	resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(`{"workspace":{"working_dir":"`+fake.root+`"}}`))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), `"step":"forward"`) {
		t.Fatalf("POST with the inner server down = %d %s, want 502 naming step forward", resp.StatusCode, b)
	}
	if strings.Contains(string(b), "127.0.0.1") {
		t.Errorf("error body %s reveals an inner address", b)
	}
}

func TestCreateLocalRuntime(t *testing.T) {
	fake := newFake(t)
	fake.local = true
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	resp, b := p.do(t, "GET", "/api/conversations/"+id, outerKeys[0], nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ohd-Source") != "ohd" {
		t.Errorf("GET local conversation = %d (source %q) %s, want 200 from ohd", resp.StatusCode, resp.Header.Get("X-Ohd-Source"), b)
	}
	resp, b = p.do(t, "POST", "/api/conversations/"+id+"/run", outerKeys[0], nil)
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("POST run on a local conversation = %d %s, want 501", resp.StatusCode, b)
	}
}

func TestGet(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)

	resp, b := p.do(t, "GET", "/api/conversations/"+strings.ToUpper(id), outerKeys[0], nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ohd-Source") != "inner" {
		t.Fatalf("GET running = %d (source %q) %s, want 200 from the inner server", resp.StatusCode, resp.Header.Get("X-Ohd-Source"), b)
	}
	if got := decode[map[string]any](t, b); got["id"] != id || got["execution_status"] != "idle" {
		t.Errorf("GET running = %s", b)
	}
	if n := len(fake.called("touch")); n != 0 {
		t.Errorf("a metadata read touched the conversation %d times, want 0", n)
	}

	fake.stopConv(id)
	before := len(fake.called("target"))
	resp, b = p.do(t, "GET", "/api/conversations/"+id, outerKeys[0], nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ohd-Source") != "ohd" {
		t.Fatalf("GET stopped = %d (source %q) %s, want 200 from ohd", resp.StatusCode, resp.Header.Get("X-Ohd-Source"), b)
	}
	if n := len(fake.called("target")) - before; n != 0 {
		t.Errorf("GET of a stopped conversation called Target %d times: it must not start it", n)
	}
	got := decode[conversationInfo](t, b)
	if got.ID != id || got.ExecutionStatus != "idle" || got.Workspace.WorkingDir != fake.root || got.OHD.State != store.StateStopped {
		t.Errorf("GET stopped = %s", b)
	}

	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/conversations/" + store.NewID(), 404},
		{"/api/conversations/not-a-uuid", 422},
	} {
		resp, b := p.do(t, "GET", tc.path, outerKeys[0], nil)
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s = %d %s, want %d", tc.path, resp.StatusCode, b, tc.code)
		}
	}
}

func TestBatchGet(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	a, b := p.create(t, nil), p.create(t, nil)
	fake.stopConv(b)
	unknown := store.NewID()
	resp, body := p.do(t, "GET", "/api/conversations?ids="+b+"&ids="+unknown+"&ids="+a, outerKeys[0], nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET ?ids = %d %s, want 200", resp.StatusCode, body)
	}
	got := decode[[]*struct {
		ID string `json:"id"`
	}](t, body)
	var ids []string
	for _, g := range got {
		if g == nil {
			ids = append(ids, "null")
		} else {
			ids = append(ids, g.ID)
		}
	}
	if d := cmp.Diff([]string{b, "null", a}, ids); d != "" {
		t.Errorf("GET ?ids order (-want +got):\n%s", d)
	}
	for _, q := range []string{"", "?ids=bad", "?other=1"} {
		resp, body := p.do(t, "GET", "/api/conversations"+q, outerKeys[0], nil)
		if resp.StatusCode != 422 || !strings.HasPrefix(string(body), `{"detail":[`) {
			t.Errorf("GET /api/conversations%s = %d %s, want 422 with a validation list", q, resp.StatusCode, body)
		}
	}
}

func TestCountAndSearch(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	ids := []string{p.create(t, nil), p.create(t, nil), p.create(t, nil)}
	if resp, b := p.do(t, "POST", "/api/conversations/"+ids[1]+"/run", outerKeys[0], nil); resp.StatusCode != 200 {
		t.Fatalf("POST run = %d %s", resp.StatusCode, b)
	}
	fake.stopConv(ids[2])

	for _, tc := range []struct {
		query string
		want  string
	}{
		{"", "3"},
		{"?status=running", "1"},
		{"?status=idle", "2"},
		{"?status=paused", "0"},
	} {
		resp, b := p.do(t, "GET", "/api/conversations/count"+tc.query, outerKeys[0], nil)
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != tc.want {
			t.Errorf("GET count%s = %d %q, want a bare %s", tc.query, resp.StatusCode, b, tc.want)
		}
	}
	if resp, b := p.do(t, "GET", "/api/conversations/count?status=bogus", outerKeys[0], nil); resp.StatusCode != 422 {
		t.Errorf("GET count?status=bogus = %d %s, want 422", resp.StatusCode, b)
	}

	type page struct {
		Items []struct {
			ID              string `json:"id"`
			ExecutionStatus string `json:"execution_status"`
		} `json:"items"`
		NextPageID *string `json:"next_page_id"`
	}
	var seen []string
	q := "/api/conversations/search?limit=2&sort_order=CREATED_AT"
	for range 3 {
		resp, b := p.do(t, "GET", q, outerKeys[0], nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", q, resp.StatusCode, b)
		}
		pg := decode[page](t, b)
		raw := decode[map[string]json.RawMessage](t, b)
		if _, ok := raw["next_page_id"]; !ok || raw["items"] == nil {
			t.Errorf("search answer %s: want items and next_page_id", b)
		}
		for _, it := range pg.Items {
			seen = append(seen, it.ID)
		}
		if pg.NextPageID == nil {
			break
		}
		q = "/api/conversations/search?limit=2&sort_order=CREATED_AT&page_id=" + *pg.NextPageID
	}
	if d := cmp.Diff(ids, seen); d != "" {
		t.Errorf("search pages (-want +got):\n%s", d)
	}
	resp, b := p.do(t, "GET", "/api/conversations/search?status=running", outerKeys[0], nil)
	pg := decode[page](t, b)
	if resp.StatusCode != 200 || len(pg.Items) != 1 || pg.Items[0].ID != ids[1] || pg.NextPageID != nil {
		t.Errorf("search?status=running = %d %s, want only %s", resp.StatusCode, b, ids[1])
	}
	resp, b = p.do(t, "GET", "/api/conversations/search", outerKeys[0], nil)
	pg = decode[page](t, b)
	if len(pg.Items) != 3 || pg.Items[0].ID != ids[2] {
		t.Errorf("search default order = %s, want newest first", b)
	}
	for _, q := range []string{"limit=0", "limit=101", "page_id=x", "sort_order=NAME"} {
		if resp, b := p.do(t, "GET", "/api/conversations/search?"+q, outerKeys[0], nil); resp.StatusCode != 422 {
			t.Errorf("search?%s = %d %s, want 422", q, resp.StatusCode, b)
		}
	}
	if n := len(fake.called("start")); n != 0 {
		t.Errorf("count/search started %d stopped conversations, want none", n)
	}
}

func TestDelete(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	resp, b := p.do(t, "DELETE", "/api/conversations/"+id, outerKeys[0], nil)
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"success":true}` {
		t.Fatalf("DELETE = %d %s, want 200 {\"success\":true}", resp.StatusCode, b)
	}
	if got := fake.called("remove"); !slices.Equal(got, []string{"remove " + id}) {
		t.Errorf("Remove calls = %v", got)
	}
	for _, path := range []string{"/api/conversations/" + id, "/api/conversations/" + store.NewID()} {
		// The agent server answers an unknown id 400 {"detail":"Bad Request"}
		// (conversation_router.py L270-281).
		if resp, b := p.do(t, "DELETE", path, outerKeys[0], nil); resp.StatusCode != 400 || strings.TrimSpace(string(b)) != `{"detail":"Bad Request"}` {
			t.Errorf("DELETE %s = %d %s, want 400 {\"detail\":\"Bad Request\"}", path, resp.StatusCode, b)
		}
	}
}

func TestUnsupportedRoutes(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	for _, tail := range []string{"children", "children/x", "credential-bindings", "credential-bindings/abc"} {
		resp, b := p.do(t, "POST", "/api/conversations/"+id+"/"+tail, outerKeys[0], nil)
		if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "not supported by ohd") {
			t.Errorf("POST .../%s = %d %s, want 501 saying why", tail, resp.StatusCode, b)
		}
	}
	if resp, b := p.do(t, "GET", "/api/settings", outerKeys[0], nil); resp.StatusCode != 404 {
		t.Errorf("GET /api/settings = %d %s, want 404", resp.StatusCode, b)
	}
}

func TestExposeSecretsRefused(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	for _, path := range []string{"/api/conversations/" + id + "/echo/x", "/api/conversations/" + id, "/api/conversations/search"} {
		resp, b := p.do(t, "GET", path, outerKeys[0], nil, "X-Expose-Secrets", "plaintext")
		if resp.StatusCode != 422 {
			t.Errorf("GET %s with X-Expose-Secrets = %d %s, want 422", path, resp.StatusCode, b)
		}
	}
}

func TestHealthNeedsNoKey(t *testing.T) {
	p := startProxy(t, newFake(t), nil)
	for _, path := range []string{"/alive", "/health", "/ready"} {
		if resp, b := p.do(t, "GET", path, "", nil); resp.StatusCode != 200 {
			t.Errorf("GET %s = %d %s, want 200", path, resp.StatusCode, b)
		}
	}
}

// TestAuth sends every route without a key and with a wrong one, and each
// configured key to one route.
func TestAuth(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	routes := []struct{ method, path string }{
		{"POST", "/api/conversations"},
		{"GET", "/api/conversations?ids=" + id},
		{"GET", "/api/conversations/count"},
		{"GET", "/api/conversations/search"},
		{"GET", "/api/conversations/" + id},
		{"PATCH", "/api/conversations/" + id},
		{"DELETE", "/api/conversations/" + id},
		{"POST", "/api/conversations/" + id + "/run"},
		{"GET", "/api/conversations/" + id + "/echo/x"},
		{"POST", "/api/conversations/" + id + "/fork"},
		{"GET", "/api/conversations/" + store.NewID()},
		{"GET", "/sockets/events/" + id},
		{"POST", "/api/conversations/prepare-for-sandbox-pause"},
		{"GET", "/no/such/route"},
	}
	for _, rt := range routes {
		for _, key := range []string{"", wrongKey, outerKeys[0][1:]} {
			resp, b := p.do(t, rt.method, rt.path, key, strings.NewReader(`{}`))
			// The agent server's exact body (dependencies.py L24-36).
			if resp.StatusCode != http.StatusUnauthorized || strings.TrimSpace(string(b)) != `{"detail":"Unauthorized"}` {
				t.Errorf("%s %s with key %q = %d %s, want 401 {\"detail\":\"Unauthorized\"}", rt.method, rt.path, key, resp.StatusCode, b)
			}
		}
	}
	if n := len(fake.called("remove")) + len(fake.called("target")); n != 0 {
		t.Errorf("unauthenticated requests reached the orchestrator %d times", n)
	}
	for _, key := range outerKeys {
		resp, b := p.do(t, "GET", "/api/conversations/count", key, nil)
		if resp.StatusCode != 200 {
			t.Errorf("GET count with configured key %q = %d %s, want 200", key, resp.StatusCode, b)
		}
	}
}

func TestKeySet(t *testing.T) {
	ks, err := newKeySet([][]byte{[]byte("a"), []byte("bb"), []byte("a-much-longer-key")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"a", true}, {"bb", true}, {"a-much-longer-key", true},
		{"", false}, {"b", false}, {"a-much-longer-kez", false}, {"bb ", false}, {"A", false},
	} {
		if got := ks.valid(tc.in); got != tc.want {
			t.Errorf("valid(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, keys := range [][][]byte{nil, {[]byte("")}, {[]byte("ok"), []byte(" ")}} {
		if _, err := newKeySet(keys); err == nil {
			t.Errorf("newKeySet(%q) = nil error, want one", keys)
		}
	}
}

// TestMetadataFromHostStateWhileStopped checks a stopped conversation is
// answered from its inner server's files on the host, with their status
// (reference §5 "Metadata reads"), by GET, ?ids=, count and search.
func TestMetadataFromHostStateWhileStopped(t *testing.T) {
	fake := newFake(t)
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)
	fake.mu.Lock()
	fake.convs[id].rec.State = store.StateStopped
	fake.innerInfo = map[string]json.RawMessage{id: json.RawMessage(`{"id":"` + id + `","execution_status":"paused","title":"from disk"}`)}
	fake.mu.Unlock()

	resp, b := p.do(t, "GET", "/api/conversations/"+id, outerKeys[0], nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"title":"from disk"`) || resp.Header.Get("X-Ohd-Source") != "host" {
		t.Errorf("GET = %d %s (source %q), want the host state", resp.StatusCode, b, resp.Header.Get("X-Ohd-Source"))
	}
	for _, tc := range []struct{ path, want string }{
		{"/api/conversations?ids=" + id, `"title":"from disk"`},
		{"/api/conversations/count?status=paused", "1"},
		{"/api/conversations/count?status=idle", "0"},
		{"/api/conversations/search?status=paused", `"title":"from disk"`},
	} {
		if resp, b := p.do(t, "GET", tc.path, outerKeys[0], nil); resp.StatusCode != 200 || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET %s = %d %s, want %s", tc.path, resp.StatusCode, b, tc.want)
		}
	}
	if got := fake.called("target"); len(got) != 0 {
		t.Errorf("metadata reads of a stopped conversation started it: %v", got)
	}
}

// TestCreateAddsWorktreeGuidance checks the agent gets the agent server's
// own worktree guidance (conversation_service.py L88-L120) with ohd's
// worktree and branch, after the suffix the client set, and that
// include_skills reaches the inner server on create and GET.
func TestCreateAddsWorktreeGuidance(t *testing.T) {
	fake := newFake(t)
	fake.tap = true
	p := startProxy(t, fake, nil)
	repo := filepath.Join(fake.root, "guided")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	id := store.NewID()
	body := `{"workspace":{"working_dir":"` + repo + `"},"worktree":true,"conversation_id":"` + id + `",` +
		`"agent":{"kind":"Agent","agent_context":{"system_message_suffix":"Be brief."}}}`
	resp, rb := p.do(t, "POST", "/api/conversations?include_skills=true", outerKeys[0], strings.NewReader(body))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST = %d %s", resp.StatusCode, rb)
	}
	req := fake.tapOf(id).requests()[0]
	got := decode[struct {
		Agent struct {
			AgentContext struct {
				Suffix string `json:"system_message_suffix"`
			} `json:"agent_context"`
		} `json:"agent"`
	}](t, req.body)
	wt := filepath.Join(fake.root, "worktrees", id, "guided")
	want := "Be brief.\n\n" + openhands.WorktreeGuidance(repo, wt, wt, "openhands/"+id)
	if got.Agent.AgentContext.Suffix != want {
		t.Errorf("forwarded system_message_suffix = %q, want %q", got.Agent.AgentContext.Suffix, want)
	}
	if !strings.Contains(req.uri, "include_skills=true") {
		t.Errorf("forwarded create %s: include_skills not passed on", req.uri)
	}
	tapAddr := fake.tapOf(id).addr
	fake.mu.Lock()
	fake.convs[id].addr = tapAddr // later requests through the tap too
	fake.mu.Unlock()
	for _, path := range []string{
		"/api/conversations/" + id + "?include_skills=true",
		"/api/conversations?ids=" + id + "&include_skills=true",
		"/api/conversations/search?include_skills=false&include_skills=true", // the server reads the last
	} {
		before := len(fake.tapOf(id).requests())
		p.do(t, "GET", path, outerKeys[0], nil)
		reqs := fake.tapOf(id).requests()
		if len(reqs) != before+1 {
			t.Errorf("GET %s made %d requests to the inner server, want 1", path, len(reqs)-before)
			continue
		}
		if last := reqs[len(reqs)-1]; last.method != "GET" || !strings.HasSuffix(last.uri, "?include_skills=true") {
			t.Errorf("GET %s reached the inner server as %s %s, want include_skills=true passed on", path, last.method, last.uri)
		}
	}
	// A value the agent server refuses is refused before anything is made.
	other := store.NewID()
	resp, rb = p.do(t, "POST", "/api/conversations?include_skills=maybe", outerKeys[0],
		strings.NewReader(`{"workspace":{"working_dir":"`+repo+`"},"worktree":true,"conversation_id":"`+other+`"}`))
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(rb), `"bool_parsing"`) {
		t.Errorf("POST ?include_skills=maybe = %d %s, want 422 bool_parsing", resp.StatusCode, rb)
	}
	if resp, _ := p.do(t, "GET", "/api/conversations/"+other, outerKeys[0], nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET the refused create's conversation = %d, want 404: nothing created", resp.StatusCode)
	}
}

// TestWorkspaceCookie checks POST /api/auth/workspace-session sets the
// agent server's oh_workspace_session_key cookie (reference §8), which
// then opens GET of a conversation's workspace routes, and nothing else,
// and never reaches the inner server.
func TestWorkspaceCookie(t *testing.T) {
	fake := newFake(t)
	fake.tap = true
	p := startProxy(t, fake, nil)
	id := p.create(t, nil)

	if resp, _ := p.do(t, "POST", "/api/auth/workspace-session", "", nil); resp.StatusCode != 401 {
		t.Errorf("POST workspace-session without a key = %d, want 401", resp.StatusCode)
	}
	resp, _ := p.do(t, "POST", "/api/auth/workspace-session", outerKeys[1], nil, "Host", "localhost:3000")
	cookies := resp.Cookies()
	if resp.StatusCode != 204 || len(cookies) != 1 {
		t.Fatalf("POST workspace-session = %d, cookies %v; want 204 and one cookie", resp.StatusCode, cookies)
	}
	c := cookies[0]
	if c.Name != "oh_workspace_session_key" || c.Value != outerKeys[1] || !c.HttpOnly || c.Path != "/api/conversations" ||
		c.MaxAge != 315360000 || c.SameSite != http.SameSiteNoneMode || !c.Secure || !c.Partitioned {
		t.Errorf("cookie = %+v (%s), want the agent server's attributes, Secure and Partitioned for localhost", c, resp.Header.Get("Set-Cookie"))
	}
	resp, _ = p.do(t, "POST", "/api/auth/workspace-session", outerKeys[1], nil, "Host", "ohd.example:8000")
	if sc := resp.Header.Get("Set-Cookie"); strings.Contains(sc, "Secure") {
		t.Errorf("Set-Cookie for a plain-http host = %s, want no Secure", sc)
	}
	resp, _ = p.do(t, "DELETE", "/api/auth/workspace-session", outerKeys[1], nil)
	if sc := resp.Header.Get("Set-Cookie"); resp.StatusCode != 204 || !strings.Contains(sc, "oh_workspace_session_key=;") || !strings.Contains(sc, "Max-Age=0") {
		t.Errorf("DELETE workspace-session = %d %s, want 204 and an expired cookie", resp.StatusCode, sc)
	}

	cookie := "oh_workspace_session_key=" + outerKeys[1]
	for _, tc := range []struct {
		method, path, cookie string
		want401              bool
	}{
		{"GET", "/api/conversations/" + id + "/workspace", cookie, false},
		{"GET", "/api/conversations/" + id + "/workspace/index.html", cookie, false},
		{"GET", "/api/conversations/" + id + "/workspace/index.html", "oh_workspace_session_key=" + wrongKey, true},
		{"GET", "/api/conversations/" + id + "/workspace/index.html", "", true},
		{"POST", "/api/conversations/" + id + "/workspace/index.html", cookie, true},
		{"GET", "/api/conversations/" + id + "/echo/x", cookie, true},
		{"GET", "/api/conversations/" + id, cookie, true},
		{"GET", "/api/conversations/search", cookie, true},
	} {
		var hdr []string
		if tc.cookie != "" {
			hdr = []string{"Cookie", tc.cookie}
		}
		resp, b := p.do(t, tc.method, tc.path, "", nil, hdr...)
		if (resp.StatusCode == 401) != tc.want401 {
			t.Errorf("%s %s with cookie %q = %d %s, want 401: %v", tc.method, tc.path, tc.cookie, resp.StatusCode, b, tc.want401)
		}
	}
	for _, r := range fake.tapOf(id).requests() {
		if r.header.Get("Cookie") != "" || strings.Contains(fmt.Sprint(r.header), outerKeys[1]) {
			t.Errorf("the inner server saw %s %s with %v: the cookie or outer key crossed", r.method, r.path, r.header)
		}
	}
}

// TestCreateErrorsNameNoMissingConversation: issue 28. A create that
// fails is undone: its 409 or 503 answer names no conversation id (there
// is none to look for), whether the client gave the id or ohd made it.
func TestCreateErrorsNameNoMissingConversation(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("%w: the folder is held by another conversation", conversation.ErrConflict), http.StatusConflict},
		{&conversation.StepError{Step: "container", Err: errors.New("the engine is down")}, http.StatusServiceUnavailable},
		{&conversation.StepError{Step: "image", Err: errors.New("no such image")}, http.StatusServiceUnavailable},
	} {
		fake := newFake(t)
		fake.createErr = tc.err
		p := startProxy(t, fake, nil)
		for _, withID := range []bool{false, true} {
			body := `{"workspace":{"working_dir":"` + fake.root + `"}}`
			if withID {
				body = `{"workspace":{"working_dir":"` + fake.root + `"},"conversation_id":"` + store.NewID() + `"}`
			}
			resp, b := p.do(t, "POST", "/api/conversations", outerKeys[0], strings.NewReader(body))
			if resp.StatusCode != tc.code || strings.Contains(string(b), "conversation_id") {
				t.Errorf("create failing with %v (id given: %v) = %d %s, want %d naming no conversation id", tc.err, withID, resp.StatusCode, b, tc.code)
			}
		}
	}
}
