package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/pkg/store"
)

// FuzzCreateBody checks that a create body either is refused or is
// forwarded with exactly three changes: working_dir replaced,
// conversation_id set, worktree removed; every other field unchanged.
func FuzzCreateBody(f *testing.F) {
	f.Add([]byte(`{"workspace":{"kind":"LocalWorkspace","working_dir":"/srv/repo"},"worktree":true,"agent":{"llm":{"model":"m"}}}`))
	f.Add([]byte(`{"workspace":{"working_dir":"/x"},"conversation_id":"{6BA7B810-9DAD-11D1-80B4-00C04FD430C8}"}`))
	f.Add([]byte(`{"workspace":{"working_dir":"/x","extra":[1,{"a":null}]},"worktree":null,"tags":{"k":"<&>"}}`))
	f.Add([]byte(`{"workspace":null}`))
	f.Add([]byte(`[]`))
	id, wd := store.NewID(), "/var/lib/ohd/worktrees/x/repo"
	f.Fuzz(func(t *testing.T, body []byte) {
		cb, verrs := parseCreateBody(body)
		if (cb == nil) == (verrs == nil) {
			t.Fatalf("parseCreateBody(%q) = %v, %v: want exactly one", body, cb, verrs)
		}
		if cb == nil {
			if _, err := json.Marshal(verrs); err != nil {
				t.Fatalf("validation errors do not encode: %v", err)
			}
			return
		}
		if cb.WorkingDir == "" {
			t.Fatalf("parsed body %q without a working_dir", body)
		}
		if cb.ID != "" && !store.ValidID(cb.ID) {
			t.Fatalf("parsed conversation_id %q is not canonical", cb.ID)
		}
		out, err := cb.rewrite(store.Conversation{ID: id, WorkingDir: wd})
		if err != nil {
			t.Fatalf("rewrite(%q): %v", body, err)
		}
		var in, got map[string]any
		if err := unmarshalNumbers(body, &in); err != nil {
			t.Fatalf("input %q: %v", body, err)
		}
		if err := unmarshalNumbers(out, &got); err != nil {
			t.Fatalf("rewrite(%q) = %q: not a JSON object: %v", body, out, err)
		}
		if _, ok := got["worktree"]; ok {
			t.Fatalf("rewrite(%q) kept worktree: %s", body, out)
		}
		if got["conversation_id"] != id {
			t.Fatalf("rewrite(%q) conversation_id = %v", body, got["conversation_id"])
		}
		ws, _ := got["workspace"].(map[string]any)
		inWS, _ := in["workspace"].(map[string]any)
		if ws == nil || ws["working_dir"] != wd {
			t.Fatalf("rewrite(%q) workspace = %v", body, got["workspace"])
		}
		for k, v := range inWS {
			if k != "working_dir" && !reflect.DeepEqual(ws[k], v) {
				t.Fatalf("rewrite(%q) changed workspace.%s: %v -> %v", body, k, v, ws[k])
			}
		}
		for k, v := range in {
			switch k {
			case "worktree", "conversation_id", "workspace", "parent_conversation_id":
				continue
			}
			if !reflect.DeepEqual(got[k], v) {
				t.Fatalf("rewrite(%q) changed %s: %v -> %v", body, k, v, got[k])
			}
		}
		if len(got) != len(in)+boolInt(!has(in, "conversation_id"))-boolInt(has(in, "worktree"))-boolInt(has(in, "parent_conversation_id")) {
			t.Fatalf("rewrite(%q) = %s: fields added or lost", body, out)
		}
		var rec map[string]any
		if err := json.Unmarshal(cb.record(id), &rec); err != nil {
			t.Fatalf("record(%q) is not a JSON object: %v", body, err)
		}
		for k := range rec {
			switch k {
			case "conversation_id", "workspace", "worktree", "other_fields", "parent_conversation_id": // (a UUID)
			default:
				if !strings.Contains(strings.Join(recordedFields, " "), k) {
					t.Fatalf("record keeps field %q, which is not on the allow-list", k)
				}
			}
		}
	})
}

func unmarshalNumbers(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func has(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzParseID checks the id parser: what it accepts becomes the canonical
// form, and the canonical form parses to itself.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6BA7B8109DAD11D180B400C04FD430C8",
		"{6ba7b810-9dad-11d1-80b4-00c04fd430c8}", "urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8",
		"6ba7b810-9dad-11d1-80b4-00c04fd430cg", "../../etc", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := parseID(s)
		if !ok {
			if id != "" {
				t.Fatalf("parseID(%q) = %q, false", s, id)
			}
			return
		}
		if !store.ValidID(id) {
			t.Fatalf("parseID(%q) = %q: not canonical", s, id)
		}
		if again, ok := parseID(id); !ok || again != id {
			t.Fatalf("parseID(%q) = %q, %v: not stable", id, again, ok)
		}
		if !strings.EqualFold(strings.ReplaceAll(id, "-", ""), strings.ReplaceAll(strings.Trim(strings.TrimPrefix(strings.ToLower(s), "urn:uuid:"), "{}"), "-", "")) {
			t.Fatalf("parseID(%q) = %q: different digits", s, id)
		}
	})
}

// FuzzForwardPath checks path splitting and query stripping: the inner
// path stays under the conversation, and no credential parameter
// survives.
func FuzzForwardPath(f *testing.F) {
	f.Add("/api/conversations/6ba7b810-9dad-11d1-80b4-00c04fd430c8/events/search", "page_id=1&session_api_key=k")
	f.Add("/api/conversations/6BA7B8109DAD11D180B400C04FD430C8", "Session%5FApi%5FKey=k&x=1")
	f.Add("/api/conversations/%7B6ba7b810-9dad-11d1-80b4-00c04fd430c8%7D/a%2F..%2Fb/", "authorization=x&ACCESS_TOKEN=y&a=%zz")
	f.Add("/api/conversations//x", "+session_api_key+=k")
	f.Add("/api/conversations/6ba7b810-9dad-11d1-80b4-00c04fd430c8/fork", "")
	f.Fuzz(func(t *testing.T, path, query string) {
		if fp, ok := parseForwardPath(path); ok && fp.ID != "" {
			p := fp.innerPath()
			if !strings.HasPrefix(p, conversationsPrefix+fp.ID) {
				t.Fatalf("innerPath of %q = %q: not under the conversation", path, p)
			}
			rest := strings.TrimPrefix(p, conversationsPrefix+fp.ID)
			if rest != "" && rest[0] != '/' {
				t.Fatalf("innerPath of %q = %q: escapes the id segment", path, p)
			}
			if fp.HasTail && "/"+fp.Tail != rest {
				t.Fatalf("innerPath of %q = %q: tail %q not kept", path, p, fp.Tail)
			}
		}
		q := stripAuthQuery(query)
		if stripAuthQuery(q) != q {
			t.Fatalf("stripAuthQuery not idempotent on %q: %q", query, q)
		}
		for _, part := range strings.Split(q, "&") {
			k, _, _ := strings.Cut(part, "=")
			if uk, err := url.QueryUnescape(k); err == nil {
				k = uk
			}
			if authQueryParams[strings.ToLower(strings.TrimSpace(k))] {
				t.Fatalf("stripAuthQuery(%q) = %q: kept %q", query, q, part)
			}
		}
		if vals, err := url.ParseQuery(q); err == nil {
			for k := range vals {
				if authQueryParams[strings.ToLower(strings.TrimSpace(k))] {
					t.Fatalf("stripAuthQuery(%q) = %q: kept %q", query, q, k)
				}
			}
		}
	})
}

// FuzzAuthMessage checks the first-message authentication parser.
func FuzzAuthMessage(f *testing.F) {
	f.Add([]byte(`{"type":"auth","session_api_key":"k"}`))
	f.Add([]byte(`{"type":"auth","session_api_key":null}`))
	f.Add([]byte(`{"type":"auth","type":"x","session_api_key":"k"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		key, ok := parseAuthMessage(websocket.MessageText, b)
		if !ok {
			if key != "" {
				t.Fatalf("parseAuthMessage(%q) = %q, false", b, key)
			}
			return
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || m["session_api_key"] != key {
			t.Fatalf("parseAuthMessage(%q) = %q: not the message's key (%v)", b, key, err)
		}
	})
}

// FuzzForwardFastPath checks that the shortcut to the forward route agrees
// with the mux: whenever it is taken, the mux would have chosen that route
// too (and not redirected).
func FuzzForwardFastPath(f *testing.F) {
	for _, p := range []string{
		"/api/conversations/" + store.NewID() + "/echo/x",
		"/api/conversations/abc/",
		"/api/conversations/count/x",
		"/api/conversations/a%2Fb/c",
		"/api/conversations/x/../y",
		"/api/conversations//x",
		"/api/conversations/x/./y",
		"/api/conversations/x//y",
		"/api/conversations/" + store.NewID(),
		"/api/conversations/%2e%2e/x",
		"/api/conversations/x/y/.",
	} {
		f.Add("GET", p)
	}
	s, err := New(Options{Conversations: newFake(f), Keys: [][]byte{[]byte(outerKeys[0])}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		r, err := http.NewRequest(method, "http://ohd.test"+target, nil)
		if err != nil || r.URL.Path == "" || r.URL.Path[0] != '/' || r.URL.Host != "ohd.test" {
			return
		}
		if method == http.MethodConnect || !isForwardPath(r.URL) {
			return
		}
		if _, pattern := s.mux.Handler(r); pattern != "/api/conversations/{id}/{tail...}" {
			t.Errorf("%s %q (path %q): the shortcut goes to the forward route, the mux to %q", method, target, r.URL.Path, pattern)
		}
	})
}

// FuzzCORSOrigin checks the Origin decision: an origin is allowed only
// when its host is loopback by name or address, or it is configured;
// a host that merely starts or ends like one is not.
func FuzzCORSOrigin(f *testing.F) {
	for _, s := range []string{
		"http://localhost:3001", "http://127.0.0.1", "http://[::1]:8080", "https://canvas.example.com",
		"http://localhost.evil.com", "http://evil.com#@localhost", "http://127.0.0.1.evil.com", "null", "",
		"http://user@localhost:1", "http://LOCALHOST:1",
	} {
		f.Add(s)
	}
	p, err := newCORSPolicy([]string{"https://canvas.example.com"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, origin string) {
		if !p.allowed(origin) {
			return
		}
		if strings.EqualFold(origin, "https://canvas.example.com") {
			return
		}
		u, err := url.Parse(origin)
		if err != nil {
			t.Fatalf("allowed(%q) but it does not parse: %v", origin, err)
		}
		switch strings.ToLower(u.Hostname()) {
		case "localhost", "127.0.0.1", "::1":
		default:
			t.Fatalf("allowed(%q): host %q is not loopback", origin, u.Hostname())
		}
	})
}
