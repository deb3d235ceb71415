package integration

import (
	"bytes"
	"context"
	"encoding/json"

	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// apiKey is the conversation API key ohd generated at first start.
func (d *daemon) apiKey() string {
	d.t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dirs.State, "session-api-key"))
	if err != nil {
		d.t.Fatalf("read the generated API key: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// apiResponse is one answer of the conversation API.
type apiResponse struct {
	Status int
	Body   []byte
	Header http.Header
}

func (r apiResponse) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// call sends a request to the conversation API with the generated key
// (unless a header list overrides X-Session-API-Key).
func (d *daemon) call(method, path string, body any, header ...string) apiResponse {
	d.t.Helper()
	r, err := d.callErr(method, path, body, header...)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// callErr is call for a request that may get no answer (ohd killed while
// it runs): the transport's error is returned.
func (d *daemon) callErr(method, path string, body any, header ...string) (apiResponse, error) {
	d.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			d.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+d.listen+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	overridden := false
	for i := 0; i+1 < len(header); i += 2 {
		overridden = overridden || http.CanonicalHeaderKey(header[i]) == "X-Session-Api-Key"
	}
	if !overridden { // (configured keys leave no generated key to read)
		req.Header.Set("X-Session-API-Key", d.apiKey())
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	c := &http.Client{Timeout: 3 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResponse{Status: resp.StatusCode, Body: b, Header: resp.Header}, nil
}

// apiCreate creates a conversation through POST /api/conversations.
func (d *daemon) apiCreate(body map[string]any) (string, map[string]any) {
	d.t.Helper()
	r := d.call("POST", "/api/conversations", body)
	if r.Status != http.StatusCreated {
		d.t.Fatalf("create = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
	}
	var info map[string]any
	r.json(d.t, &info)
	return info["id"].(string), info
}

// innerExec runs argv in the conversation's container through the inner
// agent server's exec route, forwarded by ohd.
func (d *daemon) innerExec(id string, argv ...string) (int, string) {
	d.t.Helper()
	r := d.call("POST", "/api/conversations/"+id+"/exec", map[string]any{"command": argv})
	if r.Status != http.StatusOK {
		d.t.Fatalf("exec %v = %d %s", argv, r.Status, r.Body)
	}
	var out struct {
		Stdout, Stderr string
		ExitCode       int `json:"exit_code"`
	}
	r.json(d.t, &out)
	return out.ExitCode, out.Stdout + out.Stderr
}

func (d *daemon) record(id string) store.Conversation {
	d.t.Helper()
	var c store.Conversation
	d.ohctlJSON(&c, "show", id)
	return c
}

func TestBackendAPIWorktreeRegression(t *testing.T) {
	eachBackend(t, aPIWorktreeRegression)
}

func aPIWorktreeRegression(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})

	id, info := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
	c := d.record(id)
	if got := get(info, "workspace", "working_dir"); got != c.Worktree || c.Worktree == "" {
		t.Fatalf("working_dir = %v, want the worktree %s", got, c.Worktree)
	}

	// While the container runs, at the same time: the host...
	e := entryFor(porcelain(t, repo), c.Worktree)
	if e == nil {
		t.Fatal("the host does not list the worktree")
	}
	if _, ok := e["prunable"]; ok {
		t.Errorf("host: %v", e)
	}
	gitdir, _ := os.ReadFile(filepath.Join(c.CommonDir, "worktrees", c.AdminID, "gitdir"))
	if _, err := os.Stat(strings.TrimSpace(string(gitdir))); err != nil {
		t.Errorf("host gitdir %q does not resolve: %v", gitdir, err)
	}
	// ... and inside the container.
	code, out := d.innerExec(id, "sh", "-c", "read -r l < "+c.Worktree+"/.git && d=${l#gitdir: } && test -d \"$d\" && echo resolves $d")
	if code != 0 || !strings.Contains(out, "resolves "+filepath.Join(c.CommonDir, "worktrees", c.AdminID)) {
		t.Errorf("inside, the .git file does not resolve: %d %q", code, out)
	}
	code, out = d.innerExec(id, "git", "-C", c.Worktree, "status", "--short", "--branch")
	if code != 0 || !strings.HasPrefix(out, "## openhands/"+id) {
		t.Errorf("inside, git status = %d %q", code, out)
	}

	// The agent leaves work: DELETE keeps it as a snapshot.
	d.innerExec(id, "sh", "-c", "echo work > "+c.Worktree+"/left.txt")
	r := d.call("DELETE", "/api/conversations/"+id, nil)
	if r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"success":true`)) {
		t.Fatalf("DELETE = %d %s", r.Status, r.Body)
	}
	if got := testenv.Git(t, repo, "show", "refs/ohd/snapshots/"+id+":left.txt"); got != "work" {
		t.Errorf("snapshot left.txt = %q", got)
	}
	if entryFor(porcelain(t, repo), c.Worktree) != nil {
		t.Error("stale registration after DELETE")
	}

	// A clean conversation: its branch goes too.
	id2, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
	d.call("DELETE", "/api/conversations/"+id2, nil)
	if refs := testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, id2) {
		t.Errorf("the clean conversation's branch remains:\n%s", refs)
	}

	// A non-git workspace starts without a worktree.
	plain := testenv.TempDir(t)
	id3, info3 := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": plain}, "worktree": true})
	if got := get(info3, "workspace", "working_dir"); got != plain {
		t.Errorf("non-git working_dir = %v, want %s", got, plain)
	}
	if c3 := d.record(id3); c3.Worktree != "" || len(c3.Notes) == 0 {
		t.Errorf("non-git record = %+v", c3)
	}
	d.call("DELETE", "/api/conversations/"+id3, nil)

	// Ten in a row in the same repository leave no prunable entry.
	for i := 0; i < 10; i++ {
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
		if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != http.StatusOK {
			t.Fatalf("DELETE %d = %d %s", i, r.Status, r.Body)
		}
	}
	out = testenv.Git(t, repo, "worktree", "list", "--porcelain")
	if strings.Contains(out, "prunable") || strings.Count(out, "worktree ") != 1 {
		t.Errorf("after ten conversations:\n%s", out)
	}
}

func TestBackendAPIContracts(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
		c := d.record(id)

		if r := d.call("GET", "/api/conversations/"+id, nil); r.Status != 200 || !bytes.Contains(r.Body, []byte(id)) {
			t.Errorf("GET = %d %s", r.Status, r.Body)
		}
		unknown := store.NewID()
		r := d.call("GET", "/api/conversations?ids="+id+"&ids="+unknown, nil)
		var batch []map[string]any
		r.json(t, &batch)
		if r.Status != 200 || len(batch) != 2 || batch[0]["id"] != id || batch[1] != nil {
			t.Errorf("?ids= = %d %s, want [conversation, null]", r.Status, r.Body)
		}
		if r := d.call("GET", "/api/conversations", nil); r.Status != 422 {
			t.Errorf("no ids = %d, want 422", r.Status)
		}
		r = d.call("GET", "/api/conversations/count", nil)
		if strings.TrimSpace(string(r.Body)) != "1" {
			t.Errorf("count = %d %q, want the bare integer 1", r.Status, r.Body)
		}
		r = d.call("GET", "/api/conversations/count?status=idle", nil)
		if strings.TrimSpace(string(r.Body)) != "1" {
			t.Errorf("count?status=idle = %q", r.Body)
		}
		r = d.call("GET", "/api/conversations/count?status=running", nil)
		if strings.TrimSpace(string(r.Body)) != "0" {
			t.Errorf("count?status=running = %q", r.Body)
		}
		var search map[string]any
		d.call("GET", "/api/conversations/search", nil).json(t, &search)
		if items, ok := search["items"].([]any); !ok || len(items) != 1 {
			t.Errorf("search = %v", search)
		}
		if _, ok := search["next_page_id"]; !ok {
			t.Errorf("search lacks next_page_id: %v", search)
		}
		for _, tail := range []string{"children", "credential-bindings"} {
			if r := d.call("POST", "/api/conversations/"+id+"/"+tail, "{}"); r.Status != 501 {
				t.Errorf("%s = %d, want 501", tail, r.Status)
			}
		}
		if r := d.call("GET", "/api/conversations/"+id+"/echo/x", nil, "X-Expose-Secrets", "true"); r.Status != 422 {
			t.Errorf("X-Expose-Secrets = %d, want 422", r.Status)
		}

		// Header hygiene, seen by the inner server.
		r = d.call("GET", "/api/conversations/"+id+"/echo/x?session_api_key=leak&keep=1", nil,
			"Authorization", "Bearer outer-token", "Cookie", "session=outer")
		var echo struct {
			Headers  map[string][]string `json:"headers"`
			RawQuery string              `json:"raw_query"`
		}
		r.json(t, &echo)
		innerKey, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
		for _, h := range []string{"Authorization", "Cookie"} {
			if v, ok := echo.Headers[h]; ok {
				t.Errorf("inner server received %s: %v", h, v)
			}
		}
		if got := echo.Headers["X-Session-Api-Key"]; len(got) != 1 || got[0] != strings.TrimSpace(string(innerKey)) || got[0] == d.apiKey() {
			t.Errorf("inner server received X-Session-API-Key %v, want the inner key only", got)
		}
		if strings.Contains(echo.RawQuery, "session_api_key") || !strings.Contains(echo.RawQuery, "keep=1") {
			t.Errorf("forwarded query = %q", echo.RawQuery)
		}

		// The inner address never shows.
		inner := fmt.Sprintf("127.0.0.1:%d", c.HostPort)
		for _, p := range []string{"/redirect", "/error"} {
			r := d.call("GET", "/api/conversations/"+id+p, nil)
			if bytes.Contains(r.Body, []byte(inner)) || strings.Contains(fmt.Sprint(r.Header), inner) {
				t.Errorf("%s reveals %s: %d %v %s", p, inner, r.Status, r.Header, r.Body)
			}
		}
		// Oversize body.
		if r := d.call("POST", "/api/conversations/"+id+"/big", bytes.Repeat([]byte("x"), 17<<20)); r.Status != 413 {
			t.Errorf("oversize body = %d, want 413", r.Status)
		}
		// The inner server unreachable while its record still says running:
		// its container refuses connections to the inner port (a firewall
		// rule in its own network namespace, which ohd's connections and the
		// engine's proxy's both cross), as if the server had crashed.
		pid := b.pid(t, c.ContainerID)
		reject := []string{"-t", pid, "-n", "iptables", "-I", "INPUT", "-p", "tcp", "--dport", "8000", "-j", "REJECT", "--reject-with", "tcp-reset"}
		run(t, "nsenter", reject...)
		if r := d.call("GET", "/api/conversations/"+id+"/alive", nil); r.Status != 502 || bytes.Contains(r.Body, []byte(inner)) {
			t.Errorf("inner down = %d %s, want 502 without the address", r.Status, r.Body)
		}
		reject[4] = "-D"
		run(t, "nsenter", reject...)
		if r := d.call("GET", "/api/conversations/"+id+"/echo/up", nil); r.Status != 200 {
			t.Errorf("inner up again = %d %s, want 200", r.Status, r.Body)
		}

		if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 || !bytes.Contains(r.Body, []byte(`"success":true`)) {
			t.Errorf("DELETE = %d %s", r.Status, r.Body)
		}
		if r := d.call("GET", "/api/conversations/"+id, nil); r.Status != 404 {
			t.Errorf("GET after DELETE = %d", r.Status)
		}
	})
}

func TestBackendAPIAuth(t *testing.T) {
	eachBackend(t, aPIAuth)
}

func aPIAuth(t *testing.T, b backend) {
	d := b.daemon(t)
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.TempDir(t)}})
	routes := [][2]string{
		{"POST", "/api/conversations"}, {"GET", "/api/conversations/" + id}, {"GET", "/api/conversations?ids=" + id},
		{"GET", "/api/conversations/count"}, {"GET", "/api/conversations/search"}, {"DELETE", "/api/conversations/" + id},
		{"GET", "/api/conversations/" + id + "/echo/x"}, {"POST", "/api/conversations/" + id + "/fork"},
	}
	for _, rt := range routes {
		for _, key := range []string{"", "wrong-key"} {
			r := d.call(rt[0], rt[1], "{}", "X-Session-API-Key", key)
			if r.Status != 401 {
				t.Errorf("%s %s with key %q = %d, want 401", rt[0], rt[1], key, r.Status)
			}
		}
	}
	if c := d.record(id); c.State != store.StateRunning {
		t.Fatalf("an unauthenticated DELETE changed the conversation: %s", c.State)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closeCode := func(path string, hdr http.Header, first string) websocket.StatusCode {
		t.Helper()
		conn, resp, err := websocket.Dial(ctx, "ws://"+d.listen+path, &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			if resp != nil {
				return websocket.StatusCode(resp.StatusCode)
			}
			t.Fatalf("dial %s: %v", path, err)
		}
		defer conn.CloseNow()
		if first != "" {
			_ = conn.Write(ctx, websocket.MessageText, []byte(first))
		}
		for {
			if _, _, err := conn.Read(ctx); err != nil {
				return websocket.CloseStatus(err)
			}
		}
	}
	good := http.Header{"X-Session-Api-Key": {d.apiKey()}}
	if code := closeCode("/sockets/events/"+id, nil, `{"type":"auth","session_api_key":"wrong"}`); code != 4001 {
		t.Errorf("WS with a wrong first-message key closed %d, want 4001", code)
	}
	if code := closeCode("/sockets/events/"+id, nil, ""); code != 4001 {
		t.Errorf("WS without auth closed %d, want 4001", code)
	}
	// The agent server's 4004 (reference §7), fatal for the SDK.
	if code := closeCode("/sockets/events/"+store.NewID(), good, ""); code != 4004 {
		t.Errorf("WS to an unknown conversation closed %d, want 4004", code)
	}

	// Authenticated: messages both ways, through to the inner server.
	conn, _, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/events/"+id, &websocket.DialOptions{HTTPHeader: good})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	_, hello, err := conn.Read(ctx)
	if err != nil || !bytes.Contains(hello, []byte(id)) {
		t.Fatalf("first message = %s, %v", hello, err)
	}
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"ping":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, echo, err := conn.Read(ctx); err != nil || string(echo) != `{"ping":1}` {
		t.Errorf("echo = %s, %v", echo, err)
	}
	// The inner side closing closes ours with its code.
	_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"close","code":4321}`))
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != 4321 {
		t.Errorf("inner close arrived as %v, want 4321", err)
	}
	d.call("DELETE", "/api/conversations/"+id, nil)
}

// TestBackendAPICreateFailuresUndoEverything makes each create step fail in turn.
func TestBackendAPICreateFailuresUndoEverything(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		cases := []struct {
			name, step string
			args, env  []string
			body       map[string]any
			repo       func(t *testing.T) string
		}{
			{name: "worktree add", step: "worktree", repo: brokenRepo},
			{name: "image missing", step: "image", args: []string{"--image", "ohd-no-such-image:1"}},
			{name: "container exits", step: "container", env: []string{"STANDIN_EXIT_AFTER=1s", "STANDIN_HEALTH_DELAY=1h"},
				args: []string{"--forward-env", "STANDIN_EXIT_AFTER", "--forward-env", "STANDIN_HEALTH_DELAY"}},
			{name: "readiness timeout", step: "container", env: []string{"STANDIN_HEALTH_DELAY=1h"},
				args: []string{"--forward-env", "STANDIN_HEALTH_DELAY", "--ready-timeout", "3s"}},
			{name: "inner answers 4xx", step: "forward", body: map[string]any{"standin_reject": 409}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				d := b.start(t, daemonOptions{Args: tc.args, Env: tc.env})
				repo := testenv.NewRepo(t, testenv.RepoOptions{})
				if tc.repo != nil {
					repo = tc.repo(t)
				}
				body := map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true}
				for k, v := range tc.body {
					body[k] = v
				}
				r := d.call("POST", "/api/conversations", body)
				if r.Status < 400 {
					t.Fatalf("create = %d %s, want a failure", r.Status, r.Body)
				}
				var e struct {
					Detail string `json:"detail"`
					Step   string `json:"step"`
				}
				r.json(t, &e)
				// The step is named in the body (and a header); ohd's own
				// errors say it in the detail too, an inner server's answer
				// is passed through as it was.
				if e.Step != tc.step || r.Header.Get("X-Ohd-Failed-Step") != tc.step || e.Detail == "" {
					t.Errorf("error = %d %v %s, want it to name step %s", r.Status, r.Header, r.Body, tc.step)
				}
				if tc.step != "forward" && !strings.Contains(e.Detail, tc.step) {
					t.Errorf("detail %q does not name step %s", e.Detail, tc.step)
				}
				var convs []store.Conversation
				d.ohctlJSON(&convs, "ls", "--all")
				for _, c := range convs {
					if c.State.Live() {
						t.Errorf("record %s left in live state %s", c.ID, c.State)
					}
				}
				assertNothingLeft(t, d, repo)
			})
		}
	})
}

// brokenRepo is a repository whose start commit exists but whose file
// content is missing: git worktree add fails at checkout.
func brokenRepo(t *testing.T) string {
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	blob := testenv.Git(t, repo, "rev-parse", "HEAD:README.md")
	if err := os.Remove(filepath.Join(repo, ".git", "objects", blob[:2], blob[2:])); err != nil {
		t.Fatal(err)
	}
	return repo
}
