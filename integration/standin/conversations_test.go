package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseUUID(t *testing.T) {
	const canon = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	tests := []struct {
		in   string
		want string // "" means an error
	}{
		{canon, canon},
		{strings.ToUpper(canon), canon},
		{"6f9619ff8b86d011b42d00c04fc964ff", canon},
		{"{" + canon + "}", canon},
		{"urn:uuid:" + canon, canon},
		{"URN:UUID:" + canon, canon},
		{"", ""},
		{"not-a-uuid", ""},
		{"6f9619ff-8b86-d011-b42d-00c04fc964f", ""},
		{"6f9619ff-8b86-d011-b42d-00c04fc964fg", ""},
		{"6f9619ff8-b86-d011-b42d-00c04fc964ff", ""},
		{"{6f9619ff8b86d011b42d00c04fc964ff", ""},
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff\n", ""},
	}
	for _, tt := range tests {
		got, err := parseUUID(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("parseUUID(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseUUID(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
	if id := newUUID(); id[14] != '4' || !strings.ContainsAny(id[19:20], "89ab") {
		t.Errorf("newUUID() = %q, want a version 4 UUID", id)
	}
}

func FuzzParseUUID(f *testing.F) {
	f.Add("6f9619ff-8b86-d011-b42d-00c04fc964ff")
	f.Add("{6F9619FF-8B86-D011-B42D-00C04FC964FF}")
	f.Add("urn:uuid:6f9619ff8b86d011b42d00c04fc964ff")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseUUID(s)
		if err != nil {
			return
		}
		if len(id) != 36 || strings.ToLower(id) != id {
			t.Fatalf("parseUUID(%q) = %q, want 36 lower-case characters", s, id)
		}
		again, err := parseUUID(id)
		if err != nil || again != id {
			t.Fatalf("parseUUID(%q) = %q, %v, want it canonical", id, again, err)
		}
	})
}

func TestStartConversation(t *testing.T) {
	ts := newTestServer(t, Config{})
	dir := t.TempDir()
	const id = "6f9619ff-8b86-d011-b42d-00c04fc964ff"

	c := ts.create(t, dir, strings.ToUpper(strings.ReplaceAll(id, "-", "")))
	if c.ID != id || c.Workspace.WorkingDir != dir || c.Workspace.Kind != "LocalWorkspace" || c.ExecutionStatus != "idle" || c.CreatedAt.IsZero() {
		t.Errorf("created conversation = %+v, want id %s in %s, idle", c, id, dir)
	}
	fresh := ts.create(t, dir, "")
	if _, err := parseUUID(fresh.ID); err != nil || fresh.ID == id {
		t.Errorf("conversation without an id got id %q, want a new UUID", fresh.ID)
	}

	tests := []struct {
		name, body string
		want       int
	}{
		{"same id again", fmt.Sprintf(`{"workspace":{"working_dir":%q},"conversation_id":%q}`, dir, id), 200},
		{"extra fields ignored", fmt.Sprintf(`{"agent":{"llm":{}},"worktree":true,"workspace":{"kind":"LocalWorkspace","working_dir":%q}}`, dir), 201},
		{"missing workspace", `{}`, 422},
		{"missing working_dir", `{"workspace":{}}`, 422},
		{"not JSON", `{`, 422},
		{"empty body", ``, 422},
		{"no such dir", fmt.Sprintf(`{"workspace":{"working_dir":%q}}`, filepath.Join(dir, "nope")), 400},
		{"bad id", fmt.Sprintf(`{"workspace":{"working_dir":%q},"conversation_id":"zzz"}`, dir), 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := ts.do(t, "POST", "/api/conversations", tt.body)
			if code != tt.want {
				t.Fatalf("POST /api/conversations %s = %d %s, want %d", tt.body, code, body, tt.want)
			}
		})
	}

	code, body := ts.do(t, "GET", "/api/conversations/"+id, "")
	if code != 200 {
		t.Fatalf("GET /api/conversations/%s = %d %s", id, code, body)
	}
	if diff := cmp.Diff(c, mustJSON[ConversationInfo](t, body)); diff != "" {
		t.Errorf("GET /api/conversations/%s (-created +got):\n%s", id, diff)
	}
	for path, want := range map[string]int{
		"/api/conversations/" + newUUID(): 404,
		"/api/conversations/not-a-uuid":   422,
	} {
		if code, body := ts.do(t, "GET", path, ""); code != want {
			t.Errorf("GET %s = %d %s, want %d", path, code, body, want)
		}
	}
}

func TestBatchGetConversations(t *testing.T) {
	ts := newTestServer(t, Config{})
	dir := t.TempDir()
	a := ts.create(t, dir, "")
	b := ts.create(t, dir, "")
	unknown := newUUID()

	code, body := ts.do(t, "GET", "/api/conversations?ids="+b.ID+"&ids="+unknown+"&ids="+a.ID+"&ids="+b.ID, "")
	if code != 200 {
		t.Fatalf("batch get = %d %s", code, body)
	}
	got := mustJSON[[]*ConversationInfo](t, body)
	want := []*ConversationInfo{&b, nil, &a, &b}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batch get (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(body), "null") {
		t.Errorf("batch get body %s has no null for the unknown id", body)
	}

	tests := []struct {
		query string
		want  int
	}{
		{"", 422},
		{"?ids=", 422},
		{"?ids=zzz", 422},
		{"?ids=" + a.ID + "&ids=zzz", 422},
		{"?" + strings.Repeat("&ids="+a.ID, maxBatchIDs+1)[1:], 422},
		{"?" + strings.Repeat("&ids="+a.ID, maxBatchIDs)[1:], 200},
		{"?ids=" + unknown, 200},
	}
	for _, tt := range tests {
		code, body := ts.do(t, "GET", "/api/conversations"+tt.query, "")
		if code != tt.want {
			t.Errorf("GET /api/conversations%.60s = %d %s, want %d", tt.query, code, body, tt.want)
		}
	}
	code, body = ts.do(t, "GET", "/api/conversations", "")
	want422 := `{"detail":[{"type":"missing","loc":["query","ids"],"msg":"Field required","input":null}]}` + "\n"
	if code != 422 || string(body) != want422 {
		t.Errorf("GET /api/conversations = %d %s, want 422 %s", code, body, want422)
	}
}

func TestCountAndStatus(t *testing.T) {
	ts := newTestServer(t, Config{})
	dir := t.TempDir()
	count := func(query string) string {
		t.Helper()
		code, body := ts.do(t, "GET", "/api/conversations/count"+query, "")
		return fmt.Sprintf("%d %s", code, strings.TrimSpace(string(body)))
	}
	if got := count(""); got != "200 0" {
		t.Errorf("count on empty = %s, want 200 0", got)
	}
	a := ts.create(t, dir, "")
	b := ts.create(t, dir, "")
	ts.create(t, dir, "")
	if code, body := ts.do(t, "POST", "/api/conversations/"+a.ID+"/run", ""); code != 200 {
		t.Fatalf("run = %d %s", code, body)
	}
	if code, body := ts.do(t, "POST", "/api/conversations/"+b.ID+"/pause", ""); code != 200 {
		t.Fatalf("pause = %d %s", code, body)
	}
	if code, _ := ts.do(t, "POST", "/api/conversations/"+newUUID()+"/run", ""); code != 404 {
		t.Errorf("run of an unknown conversation = %d, want 404", code)
	}
	tests := map[string]string{
		"":                 "200 3",
		"?status=idle":     "200 1",
		"?status=running":  "200 1",
		"?status=paused":   "200 1",
		"?status=finished": "200 0",
	}
	for q, want := range tests {
		if got := count(q); got != want {
			t.Errorf("count%s = %s, want %s", q, got, want)
		}
	}
	if got := count("?status=bogus"); !strings.HasPrefix(got, "422 ") {
		t.Errorf("count?status=bogus = %s, want 422", got)
	}
}

func TestSearchConversations(t *testing.T) {
	ts := newTestServer(t, Config{})
	dir := t.TempDir()
	var ids []string // creation order
	for range 5 {
		ids = append(ids, ts.create(t, dir, "").ID)
	}
	search := func(query string) conversationPage {
		t.Helper()
		code, body := ts.do(t, "GET", "/api/conversations/search"+query, "")
		if code != 200 {
			t.Fatalf("search%s = %d %s", query, code, body)
		}
		if !strings.Contains(string(body), `"next_page_id":`) {
			t.Fatalf("search%s = %s, want a next_page_id key", query, body)
		}
		return mustJSON[conversationPage](t, body)
	}
	idsOf := func(p conversationPage) []string {
		var out []string
		for _, c := range p.Items {
			out = append(out, c.ID)
		}
		return out
	}

	// Default: newest first, everything in one page.
	all := search("")
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if diff := cmp.Diff(want, idsOf(all)); diff != "" || all.NextPageID != nil {
		t.Errorf("search (-want +got):\n%s next_page_id %v", diff, all.NextPageID)
	}

	// Paging with limit=2 visits everything once, in order.
	var paged []string
	q := "?limit=2&sort_order=CREATED_AT"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p := search(q)
		paged = append(paged, idsOf(p)...)
		if p.NextPageID == nil {
			break
		}
		q = "?limit=2&sort_order=CREATED_AT&page_id=" + *p.NextPageID
	}
	if diff := cmp.Diff(ids, paged); diff != "" {
		t.Errorf("paged search (-want +got):\n%s", diff)
	}

	ts.do(t, "POST", "/api/conversations/"+ids[1]+"/run", "")
	if diff := cmp.Diff([]string{ids[1]}, idsOf(search("?status=running"))); diff != "" {
		t.Errorf("search?status=running (-want +got):\n%s", diff)
	}
	if got := search("?sort_order=UPDATED_AT_DESC"); len(got.Items) == 0 || got.Items[0].ID != ids[1] {
		t.Errorf("search?sort_order=UPDATED_AT_DESC = %v, want %s first", idsOf(got), ids[1])
	}
	if got := search("?page_id=99"); len(got.Items) != 0 || got.NextPageID != nil {
		t.Errorf("search past the end = %+v, want no items", got)
	}
	for _, bad := range []string{"?limit=0", "?limit=101", "?limit=x", "?page_id=x", "?status=x", "?sort_order=x"} {
		if code, body := ts.do(t, "GET", "/api/conversations/search"+bad, ""); code != 422 {
			t.Errorf("search%s = %d %s, want 422", bad, code, body)
		}
	}
}

func TestDeleteConversation(t *testing.T) {
	ts := newTestServer(t, Config{})
	c := ts.create(t, t.TempDir(), "")
	code, body := ts.do(t, "DELETE", "/api/conversations/"+c.ID, "")
	if code != 200 || string(body) != "{\"success\":true}\n" {
		t.Fatalf("DELETE = %d %s, want 200 {\"success\":true}", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/conversations/"+c.ID, ""); code != 404 {
		t.Errorf("GET after DELETE = %d, want 404", code)
	}
	if code, _ := ts.do(t, "DELETE", "/api/conversations/"+c.ID, ""); code != 400 {
		t.Errorf("second DELETE = %d, want 400 (as the agent server)", code)
	}
	if code, body := ts.do(t, "GET", "/api/conversations/count", ""); strings.TrimSpace(string(body)) != "0" {
		t.Errorf("count after DELETE = %d %s, want 0", code, body)
	}
	var page conversationPage
	_, body = ts.do(t, "GET", "/api/conversations/search", "")
	if err := json.Unmarshal(body, &page); err != nil || page.Items == nil || len(page.Items) != 0 {
		t.Errorf("search after DELETE = %s, want items []", body)
	}
}
