package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// unixHTTP is an HTTP client whose every connection goes to one Unix
// socket: the control socket, or a conversation's broker socket.
func unixHTTP(socket string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", socket)
			},
			DisableCompression: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// rawCall sends one request and returns the answer; the path is sent as
// written (escapes and all).
func rawCall(hc *http.Client, base, method, path string, body []byte, header ...string) (apiResponse, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, base, rd)
	if err != nil {
		return apiResponse{}, err
	}
	req.URL.Opaque = path // sent byte for byte, not re-escaped
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return apiResponse{Status: resp.StatusCode, Body: b, Header: resp.Header}, err
}

// errorMessage extracts the human message of an error answer of any of
// ohd's APIs: {"error": ...} (control, broker), {"detail": "..."} or
// FastAPI's {"detail": [{"loc", "msg", ...}]} (conversation API).
func errorMessage(body []byte) string {
	var v struct {
		Error  string          `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	if v.Error != "" {
		return v.Error
	}
	var s string
	if json.Unmarshal(v.Detail, &s) == nil {
		return s
	}
	var list []struct {
		Loc []any  `json:"loc"`
		Msg string `json:"msg"`
	}
	if json.Unmarshal(v.Detail, &list) != nil {
		return ""
	}
	var parts []string
	for _, e := range list {
		loc := make([]string, len(e.Loc))
		for i, l := range e.Loc {
			loc[i] = fmt.Sprint(l)
		}
		parts = append(parts, strings.Join(loc, ".")+": "+e.Msg)
	}
	return strings.Join(parts, "; ")
}

// badInputState is everything bad input must leave unchanged: the store
// (records, secrets, git hosts, LLM profiles, OAuth servers), the
// repositories' refs and worktrees, the server's containers, the runtime
// directory's socket directories and the worktree root.
func badInputState(t testing.TB, d *daemon, ctl *http.Client, repos ...string) string {
	t.Helper()
	var b strings.Builder
	for _, route := range []string{"/v1/conversations", "/v1/secrets", "/v1/git-credentials", "/v1/llm-profiles", "/v1/oauth-servers"} {
		r, err := rawCall(ctl, "http://ohd", "GET", route, nil)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET %s: %v %d %s", route, err, r.Status, r.Body)
		}
		fmt.Fprintf(&b, "%s %s\n", route, r.Body)
	}
	for _, repo := range repos {
		fmt.Fprintf(&b, "refs of %s:\n%s\n", repo, testenv.Git(t, repo, "for-each-ref"))
		fmt.Fprintf(&b, "worktrees of %s:\n%s\n", repo, testenv.Git(t, repo, "worktree", "list", "--porcelain"))
	}
	be := backendOf(d)
	var lines []string
	for id := range be.ofServer(t, d.serverID()) {
		lines = append(lines, fmt.Sprintf("%s running=%v", id, be.running(t, id)))
	}
	sort.Strings(lines)
	fmt.Fprintf(&b, "containers:\n%s\n", strings.Join(lines, "\n"))
	for _, dir := range append([]string{filepath.Join(d.dirs.Run, "conversations"), d.dirs.Worktrees}, repos...) {
		fmt.Fprintf(&b, "tree of %s:\n", dir)
		_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				fmt.Fprintf(&b, "  %s: %v\n", p, err)
				return nil
			}
			if e.Name() == ".git" && e.IsDir() && p != dir {
				// The repository's own git dir: its refs and worktrees are
				// compared above; objects and logs are git's business.
				for _, sub := range []string{"worktrees", "refs"} {
					_ = filepath.WalkDir(filepath.Join(p, sub), func(q string, _ fs.DirEntry, err error) error {
						if err == nil {
							fmt.Fprintf(&b, "  %s\n", q)
						}
						return nil
					})
				}
				return fs.SkipDir
			}
			info, err := e.Info()
			if err != nil {
				return nil
			}
			fmt.Fprintf(&b, "  %s %v\n", p, info.Mode())
			return nil
		})
	}
	return b.String()
}

// badCase is one malformed request and what its refusal must say.
type badCase struct {
	name   string
	api    string // "control", "conversation" or "broker"
	method string
	path   string
	body   []byte
	header []string
	// want is a piece of the message (case-insensitive): the offending
	// field or value, or what to do.
	want string
	// hint, if set, must be in the X-Ohd-Hint header (where the body is
	// the agent server's own, which says little).
	hint string
}

// TestBackendBadInputChangesNothing sends malformed requests to the control API,
// the conversation API and a conversation's broker, and checks that each
// is refused with a 4xx and a message that names what is wrong, and that
// nothing changed: not the store, the repositories, the containers, nor the
// socket and worktree directories.
func TestBackendBadInputChangesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		api := newAPIClient(d, 4)
		ctl := unixHTTP(d.socket)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()

		// A fake LLM provider, so that a profile exists for the proxy routes.
		provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
		t.Cleanup(provider.Close)
		if _, err := d.ohctlIn("granted-secret-value-"+store.NewID(), "secret", "set", "granted"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ohctlIn("llm-key-"+store.NewID(), "secret", "set", "llmkey"); err != nil {
			t.Fatal(err)
		}
		d.ohctl("llm", "set", "prov", "--base-url", provider.URL, "--key-secret", "llmkey")
		d.ohctl("git-host", "set", "git.example.com", "--secret", "granted")

		id0, err := api.create(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range [][2]string{{"secret", "granted"}, {"llm", "prov"}, {"git", "git.example.com"}} {
			d.ohctl("grant", id0, g[0], g[1])
		}
		c0 := d.record(id0)
		token, err := os.ReadFile(filepath.Join(c0.BrokerDir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		brk := unixHTTP(filepath.Join(c0.BrokerDir, "broker.sock"))
		brokerAuth := []string{"Authorization", "Bearer " + strings.TrimSpace(string(token)), "X-OHD-Request", "1"}

		// Paths that are bad in every API.
		dir := testenv.TempDir(t)
		loop, dangling, toRepo := filepath.Join(dir, "loop-a"), filepath.Join(dir, "dangling"), filepath.Join(dir, "to-repo")
		toState, toRoot := filepath.Join(dir, "to-state"), filepath.Join(dir, "to-root")
		for _, l := range [][2]string{{filepath.Join(dir, "loop-b"), loop}, {loop, filepath.Join(dir, "loop-b")}, {filepath.Join(dir, "nowhere"), dangling}, {repo, toRepo}, {d.dirs.State, toState}, {"/", toRoot}} {
			if err := os.Symlink(l[0], l[1]); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(repo, "README.md")
		huge := strings.Repeat("a", 10<<20)
		unknown := store.NewID()
		j := func(v any) []byte { return mustJSON(v) }
		create := func(repo string, extra ...any) []byte {
			m := map[string]any{"repo": repo, "worktree": true}
			for i := 0; i+1 < len(extra); i += 2 {
				m[extra[i].(string)] = extra[i+1]
			}
			return j(m)
		}
		apiCreate := func(wd any, extra ...any) []byte {
			m := map[string]any{"workspace": map[string]any{"working_dir": wd}, "worktree": true}
			for i := 0; i+1 < len(extra); i += 2 {
				m[extra[i].(string)] = extra[i+1]
			}
			return j(m)
		}
		gitReq := func(s string) []byte { return []byte(s) }
		manyIDs := "/api/conversations?ids=" + strings.TrimSuffix(strings.Repeat(unknown+"&ids=", 100), "&ids=")

		cases := []badCase{
			// The control API (ohctl's), raw over its socket.
			{name: "create: truncated JSON", api: "control", method: "POST", path: "/v1/conversations", body: []byte(`{"repo":`), want: "request body"},
			{name: "create: JSON array", api: "control", method: "POST", path: "/v1/conversations", body: []byte(`[]`), want: "request body"},
			{name: "create: repo of the wrong type", api: "control", method: "POST", path: "/v1/conversations", body: []byte(`{"repo":5}`), want: "repo"},
			{name: "create: worktree of the wrong type", api: "control", method: "POST", path: "/v1/conversations", body: []byte(`{"repo":"/tmp","worktree":"yes"}`), want: "worktree"},
			{name: "create: unknown field", api: "control", method: "POST", path: "/v1/conversations", body: []byte(`{"repo":"/tmp","wrktree":true}`), want: "wrktree"},
			{name: "create: two JSON values", api: "control", method: "POST", path: "/v1/conversations", body: []byte(`{"repo":"/tmp"}{"repo":"/"}`), want: "more than one"},
			{name: "create: 10 MiB repo path", api: "control", method: "POST", path: "/v1/conversations", body: create("/" + huge), want: "too large"},
			{name: "create: relative repo", api: "control", method: "POST", path: "/v1/conversations", body: create("relative/path"), want: "absolute"},
			{name: "create: repo traversing to nowhere", api: "control", method: "POST", path: "/v1/conversations", body: create(repo + "/../../../../no-such-ohd-dir"), want: "does not exist"},
			{name: "create: repo is a file", api: "control", method: "POST", path: "/v1/conversations", body: create(file), want: "not a directory"},
			{name: "create: repo with NUL", api: "control", method: "POST", path: "/v1/conversations", body: create(repo + "\x00x"), want: "control character"},
			{name: "create: repo with newline", api: "control", method: "POST", path: "/v1/conversations", body: create(repo + "\nx"), want: "control character"},
			{name: "create: repo not UTF-8", api: "control", method: "POST", path: "/v1/conversations", body: []byte("{\"repo\":\"" + dir + "/\xff\xfe\",\"worktree\":true}"), want: "does not exist"},
			{name: "create: repo a symlink loop", api: "control", method: "POST", path: "/v1/conversations", body: create(loop), want: "symbolic links"},
			{name: "create: repo a dangling symlink", api: "control", method: "POST", path: "/v1/conversations", body: create(dangling), want: "does not exist"},
			{name: "create: repo is ohd's state dir", api: "control", method: "POST", path: "/v1/conversations", body: create(d.dirs.State), want: d.dirs.State},
			{name: "create: repo a symlink to ohd's state dir", api: "control", method: "POST", path: "/v1/conversations", body: create(toState), want: d.dirs.State},
			{name: "create: repo inside ohd's state dir", api: "control", method: "POST", path: "/v1/conversations", body: create(filepath.Join(d.dirs.State, "locks")), want: d.dirs.State},
			{name: "create: repo is the runtime dir", api: "control", method: "POST", path: "/v1/conversations", body: create(d.dirs.Run), want: d.dirs.Run},
			{name: "create: repo is a live worktree", api: "control", method: "POST", path: "/v1/conversations", body: create(c0.Worktree), want: d.dirs.Worktrees},
			{name: "create: repo is /", api: "control", method: "POST", path: "/v1/conversations", body: create("/"), want: "/"},
			{name: "create: repo a symlink to /", api: "control", method: "POST", path: "/v1/conversations", body: create(toRoot), want: "/"},
			{name: "create: start point without worktree", api: "control", method: "POST", path: "/v1/conversations", body: j(map[string]any{"repo": repo, "start_point": "main"}), want: "without a worktree"},
			{name: "create: option-like start point", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "start_point", "--upload-pack=touch /tmp/pwned"), want: "start point"},
			{name: "create: unknown start point", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "start_point", "no-such-branch"), want: "no-such-branch"},
			{name: "create: start point traversing", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "start_point", "main/../../../etc"), want: "start point"},
			{name: "create: start point with newline", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "start_point", "main\nHEAD"), want: "start point"},
			{name: "create: id traversing", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "id", "../../etc"), want: "not a UUID"},
			{name: "create: id in upper case", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "id", strings.ToUpper(unknown)), want: "not a UUID"},
			{name: "create: id of a live conversation", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "id", id0), want: "already exists"},
			{name: "create: secret grant with a slash", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "grants", map[string]any{"secrets": []string{"a/b"}}), want: "a/b"},
			{name: "create: git grant traversing", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "grants", map[string]any{"git": []string{"github.com/../x"}}), want: "git grant"},
			{name: "create: grants of the wrong type", api: "control", method: "POST", path: "/v1/conversations", body: create(repo, "grants", map[string]any{"secrets": "x"}), want: "secrets"},
			{name: "show: id not a UUID", api: "control", method: "GET", path: "/v1/conversations/not-a-uuid", want: "not a UUID"},
			{name: "show: id traversing", api: "control", method: "GET", path: "/v1/conversations/..%2F..%2Fetc%2Fpasswd", want: "not a UUID"},
			{name: "show: id not UTF-8", api: "control", method: "GET", path: "/v1/conversations/%FF%FE", want: "not a UUID"},
			{name: "rm: unknown id", api: "control", method: "DELETE", path: "/v1/conversations/" + unknown, want: unknown},
			{name: "rm: discard not a boolean", api: "control", method: "DELETE", path: "/v1/conversations/" + id0 + "?discard=maybe", want: "discard"},
			{name: "grant: unknown kind", api: "control", method: "POST", path: "/v1/conversations/" + id0 + "/grants", body: j(map[string]string{"kind": "password", "name": "x"}), want: "grant kind"},
			{name: "grant: secret name traversing", api: "control", method: "POST", path: "/v1/conversations/" + id0 + "/grants", body: j(map[string]string{"kind": "secret", "name": "../x"}), want: "../x"},
			{name: "grant: truncated JSON", api: "control", method: "POST", path: "/v1/conversations/" + id0 + "/grants", body: []byte(`{"kind":`), want: "request body"},
			{name: "grant: unknown conversation", api: "control", method: "POST", path: "/v1/conversations/" + unknown + "/grants", body: j(map[string]string{"kind": "secret", "name": "granted"}), want: unknown},
			{name: "grant: name of the wrong type", api: "control", method: "POST", path: "/v1/conversations/" + id0 + "/grants", body: []byte(`{"kind":"secret","name":["granted"]}`), want: "name"},
			{name: "revoke: unknown kind", api: "control", method: "DELETE", path: "/v1/conversations/" + id0 + "/grants/password/x", want: "grant kind"},
			{name: "exec: no command", api: "control", method: "POST", path: "/v1/conversations/" + id0 + "/exec", body: []byte(`{"cmd":[]}`), want: "no command"},
			{name: "exec: command of the wrong type", api: "control", method: "POST", path: "/v1/conversations/" + id0 + "/exec", body: []byte(`{"cmd":"ls"}`), want: "cmd"},
			{name: "token rotate: id not a UUID", api: "control", method: "POST", path: "/v1/conversations/x/token/rotate", want: "not a UUID"},
			{name: "logs: follow not a boolean", api: "control", method: "GET", path: "/v1/conversations/" + id0 + "/logs?follow=often", want: "follow"},
			{name: "secret set: name traversing", api: "control", method: "PUT", path: "/v1/secrets/..%2F..%2Fetc", body: []byte("v"), want: "secret name"},
			{name: "secret set: name starting with a dot", api: "control", method: "PUT", path: "/v1/secrets/.hidden", body: []byte("v"), want: "secret name"},
			{name: "secret set: name too long", api: "control", method: "PUT", path: "/v1/secrets/" + strings.Repeat("n", 129), body: []byte("v"), want: "secret name"},
			{name: "secret set: name not UTF-8", api: "control", method: "PUT", path: "/v1/secrets/%FF", body: []byte("v"), want: "secret name"},
			{name: "secret set: empty value", api: "control", method: "PUT", path: "/v1/secrets/empty", body: []byte{}, want: "empty value"},
			{name: "secret set: value over the limit", api: "control", method: "PUT", path: "/v1/secrets/big", body: bytes.Repeat([]byte("v"), store.MaxSecretSize+1), want: "limit"},
			{name: "secret rm: name traversing", api: "control", method: "DELETE", path: "/v1/secrets/..%2Fgranted", want: "secret name"},
			{name: "git host: host with a slash", api: "control", method: "PUT", path: "/v1/git-credentials/evil.com%2Fx", body: j(map[string]string{"username": "u", "secret": "granted"}), want: "git host"},
			{name: "git host: username with a newline", api: "control", method: "PUT", path: "/v1/git-credentials/git.example.org", body: j(map[string]string{"username": "u\npassword=x", "secret": "granted"}), want: "username"},
			{name: "git host: secret name traversing", api: "control", method: "PUT", path: "/v1/git-credentials/git.example.org", body: j(map[string]string{"username": "u", "secret": "../granted"}), want: "secret name"},
			{name: "llm: base URL not http", api: "control", method: "PUT", path: "/v1/llm-profiles/p2", body: j(map[string]string{"base_url": "file:///etc/passwd", "key_secret": "llmkey"}), want: "base URL"},
			{name: "llm: unknown field", api: "control", method: "PUT", path: "/v1/llm-profiles/p2", body: []byte(`{"base_url":"http://x","key_secret":"llmkey","api_key":"sk-inline"}`), want: "api_key"},
			{name: "llm: profile name traversing", api: "control", method: "PUT", path: "/v1/llm-profiles/..%2Fp", body: j(map[string]string{"base_url": "http://x", "key_secret": "llmkey"}), want: "profile name"},
			{name: "oauth: token URL not http", api: "control", method: "PUT", path: "/v1/oauth-servers/o", body: j(map[string]string{"token_url": "ftp://x/token"}), want: "token URL"},
			{name: "prune: older than not a duration", api: "control", method: "POST", path: "/v1/prune", body: j(map[string]string{"older_than": "yesterday"}), want: "yesterday"},
			{name: "prune: negative older than", api: "control", method: "POST", path: "/v1/prune", body: j(map[string]string{"older_than": "-5h"}), want: "-5h"},
			{name: "prune: dry run of the wrong type", api: "control", method: "POST", path: "/v1/prune", body: []byte(`{"dry_run":"no"}`), want: "dry_run"},
			{name: "audit: negative limit", api: "control", method: "GET", path: "/v1/audit?limit=-1", want: "limit"},
			{name: "audit: conversation traversing", api: "control", method: "GET", path: "/v1/audit?conversation=..%2F..%2Fx", want: "not a UUID"},
			{name: "doctor: repair on GET", api: "control", method: "GET", path: "/v1/doctor?repair=true", want: "POST"},
			{name: "doctor: id not a UUID", api: "control", method: "GET", path: "/v1/doctor?id=../x", want: "not a UUID"},
			{name: "unknown route", api: "control", method: "GET", path: "/v1/nope", want: "ohctl --help"},
			{name: "browser origin", api: "control", method: "POST", path: "/v1/conversations", body: create(repo), header: []string{"Origin", "http://evil.example"}, want: "browser"},

			// The conversation API (the outer agent server's), with its key.
			{name: "create: truncated JSON", api: "conversation", method: "POST", path: "/api/conversations", body: []byte(`{"workspace":`), want: "json"},
			{name: "create: JSON array", api: "conversation", method: "POST", path: "/api/conversations", body: []byte(`[]`), want: "array"},
			{name: "create: no workspace", api: "conversation", method: "POST", path: "/api/conversations", body: []byte(`{}`), want: "workspace"},
			{name: "create: workspace of the wrong type", api: "conversation", method: "POST", path: "/api/conversations", body: []byte(`{"workspace":"/tmp"}`), want: "workspace"},
			{name: "create: working_dir of the wrong type", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(5), want: "working_dir"},
			{name: "create: worktree of the wrong type", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(repo, "worktree", "yes"), want: "worktree"},
			{name: "create: conversation_id traversing", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(repo, "conversation_id", "../../etc"), want: "conversation_id"},
			{name: "create: relative working_dir", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate("relative/dir"), want: "absolute"},
			{name: "create: working_dir traversing to nowhere", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(repo + "/../../../../no-such-ohd-dir"), want: "does not exist"},
			{name: "create: 10 MiB working_dir", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate("/" + huge), want: "long"},
			{name: "create: working_dir is ohd's state dir", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(d.dirs.State), want: d.dirs.State},
			{name: "create: working_dir a symlink to ohd's state dir", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(toState), want: d.dirs.State},
			{name: "create: working_dir is the runtime dir", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(d.dirs.Run), want: d.dirs.Run},
			{name: "create: working_dir is /", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate("/"), want: "/"},
			{name: "create: working_dir with NUL", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(repo + "\x00x"), want: "control character"},
			{name: "create: working_dir not UTF-8", api: "conversation", method: "POST", path: "/api/conversations", body: []byte("{\"workspace\":{\"working_dir\":\"" + dir + "/\xff\xfe\"}}"), want: "does not exist"},
			{name: "create: working_dir a symlink loop", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(loop), want: "symbolic links"},
			{name: "create: working_dir a dangling symlink", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate(dangling), want: "does not exist"},
			{name: "create: body over the limit", api: "conversation", method: "POST", path: "/api/conversations", body: apiCreate("/" + strings.Repeat("a", 17<<20)), want: "large"},
			{name: "get: id not a UUID", api: "conversation", method: "GET", path: "/api/conversations/not-a-uuid", want: "conversation_id"},
			{name: "get: id traversing", api: "conversation", method: "GET", path: "/api/conversations/..%2F..%2Fetc%2Fpasswd", want: "conversation_id"},
			{name: "get: id with NUL", api: "conversation", method: "GET", path: "/api/conversations/" + id0 + "%00", want: "conversation_id"},
			{name: "batch: id not a UUID", api: "conversation", method: "GET", path: "/api/conversations?ids=not-a-uuid", want: "ids"},
			{name: "batch: too many ids", api: "conversation", method: "GET", path: manyIDs, want: "ids"},
			{name: "count: unknown status", api: "conversation", method: "GET", path: "/api/conversations/count?status=bogus", want: "status"},
			{name: "search: limit zero", api: "conversation", method: "GET", path: "/api/conversations/search?limit=0", want: "limit"},
			{name: "search: limit not a number", api: "conversation", method: "GET", path: "/api/conversations/search?limit=ten", want: "limit"},
			{name: "search: unknown sort order", api: "conversation", method: "GET", path: "/api/conversations/search?sort_order=SIDEWAYS", want: "sort_order"},
			{name: "delete: id not a UUID", api: "conversation", method: "DELETE", path: "/api/conversations/x", want: "conversation_id"},
			// The agent server's exact body (ref §8); X-Ohd-Hint names the id.
			{name: "delete: unknown id", api: "conversation", method: "DELETE", path: "/api/conversations/" + unknown, want: "bad request", hint: unknown},
			{name: "forward: unknown conversation", api: "conversation", method: "GET", path: "/api/conversations/" + unknown + "/echo/x", want: "not found"},
			{name: "forward: X-Expose-Secrets", api: "conversation", method: "GET", path: "/api/conversations/" + id0 + "/echo/x", header: []string{"X-Expose-Secrets", "true"}, want: "X-Expose-Secrets"},
			{name: "forward: body over the limit", api: "conversation", method: "POST", path: "/api/conversations/" + id0 + "/big", body: bytes.Repeat([]byte("x"), 17<<20), want: "large"},

			// The broker of a live conversation, with its valid token.
			{name: "secret not granted", api: "broker", method: "GET", path: "/v1/secrets/llmkey", want: "not granted"},
			{name: "secret name traversing", api: "broker", method: "GET", path: "/v1/secrets/..%2F..%2Fetc%2Fpasswd", want: "not granted"},
			{name: "secret name not UTF-8", api: "broker", method: "GET", path: "/v1/secrets/%FF%FE", want: "not granted"},
			{name: "git: empty host", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=https\nhost=\n\n"), want: "host"},
			{name: "git: NUL in a value", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=https\nhost=git.example.com\x00evil\n\n"), want: "NUL"},
			{name: "git: CR in a value", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=https\r\nhost=git.example.com\r\n\r\n"), want: "CR"},
			{name: "git: file protocol", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=file\nhost=git.example.com\n\n"), want: "protocol"},
			{name: "git: path traversing", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=https\nhost=git.example.com\npath=acme/../../x\n\n"), want: "path"},
			{name: "git: repeated host", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=https\nhost=git.example.com\nhost=evil.com\n\n"), want: "host"},
			{name: "git: line without =", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: gitReq("protocol=https\nhost=git.example.com\ngarbage\n\n"), want: "="},
			{name: "git: unknown action", api: "broker", method: "POST", path: "/v1/git-credential?action=steal", body: gitReq("protocol=https\nhost=git.example.com\n\n"), want: "action"},
			{name: "git: body over the limit", api: "broker", method: "POST", path: "/v1/git-credential?action=get", body: append(gitReq("protocol=https\nhost=git.example.com\nusername="), bytes.Repeat([]byte("u"), 65<<10)...), want: "large"},
			{name: "llm: profile not granted", api: "broker", method: "GET", path: "/v1/llm/other", want: "not granted"},
			{name: "llm proxy: escaped slashes", api: "broker", method: "GET", path: "/v1/llm/prov/proxy/..%2F..%2Fadmin", want: "path"},
			{name: "llm proxy: escaped dot-dot segment", api: "broker", method: "GET", path: "/v1/llm/prov/proxy/%2e%2e/admin", want: "path"},
			{name: "llm proxy: dot segment", api: "broker", method: "POST", path: "/v1/llm/prov/proxy/chat/%2E/completions", body: []byte(`{}`), want: "path"},
			{name: "oauth: server not granted", api: "broker", method: "GET", path: "/v1/oauth/other/token", want: "not granted"},
			{name: "unknown route", api: "broker", method: "GET", path: "/v1/nope", want: "route"},
			{name: "wrong method", api: "broker", method: "POST", path: "/v1/whoami", want: "method"},
			{name: "no X-OHD-Request header", api: "broker", method: "GET", path: "/v1/whoami", header: []string{"X-OHD-Request", ""}, want: "X-OHD-Request"},
			{name: "forged token", api: "broker", method: "GET", path: "/v1/whoami", header: []string{"Authorization", "Bearer ohd1." + id0 + ".1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, want: "token"},
		}

		before := badInputState(t, d, ctl, repo)
		counts := map[string]int{}
		for _, tc := range cases {
			var r apiResponse
			var err error
			switch tc.api {
			case "control":
				r, err = rawCall(ctl, "http://ohd", tc.method, tc.path, tc.body, append([]string{"Content-Type", "application/json"}, tc.header...)...)
			case "conversation":
				r, err = rawCall(api.hc, api.base, tc.method, tc.path, tc.body, append([]string{"X-Session-API-Key", api.key, "Content-Type", "application/json"}, tc.header...)...)
			case "broker":
				r, err = rawCall(brk, "http://ohd-broker", tc.method, tc.path, tc.body, append(append([]string{}, brokerAuth...), tc.header...)...)
			default:
				t.Fatalf("case %q: unknown api %q", tc.name, tc.api)
			}
			counts[tc.api]++
			name := tc.api + ": " + tc.name
			if err != nil {
				t.Errorf("%s: %s %s: %v", name, tc.method, clip(tc.path), err)
				continue
			}
			msg := errorMessage(r.Body)
			if testing.Verbose() {
				t.Logf("%s: %d %s", name, r.Status, clip(msg))
			}
			if r.Status < 400 || r.Status > 499 {
				t.Errorf("%s: %s %s = %d %s, want a 4xx", name, tc.method, clip(tc.path), r.Status, clip(string(r.Body)))
			}
			if strings.TrimSpace(msg) == "" {
				t.Errorf("%s: %s %s = %d with no error message: %s", name, tc.method, clip(tc.path), r.Status, clip(string(r.Body)))
			} else if !strings.Contains(strings.ToLower(msg), strings.ToLower(tc.want)) {
				t.Errorf("%s: message %q does not mention %q", name, clip(msg), tc.want)
			}
			if tc.hint != "" && !strings.Contains(r.Header.Get("X-Ohd-Hint"), tc.hint) {
				t.Errorf("%s: X-Ohd-Hint %q does not mention %q", name, r.Header.Get("X-Ohd-Hint"), tc.hint)
			}
			if len(msg) > 4096 {
				t.Errorf("%s: message is %d bytes long: an error should say what is wrong, not repeat the input", name, len(msg))
			}
			if after := badInputState(t, d, ctl, repo); after != before {
				t.Errorf("%s changed state (-before +after):\n%s", name, cmp.Diff(before, after))
				before = after
			}
		}
		t.Logf("%d malformed requests refused: %d to the control API, %d to the conversation API, %d to the broker",
			len(cases), counts["control"], counts["conversation"], counts["broker"])

		// The conversation was not disturbed by any of it.
		if err := proxiedGet(ctx, api, id0, "after-bad-input"); err != nil {
			t.Error(err)
		}
		if c := d.record(id0); c.State != store.StateRunning {
			t.Errorf("conversation after bad input: %s", c.State)
		}

		// A symlink to a valid repository is fine: ohd works on the canonical
		// path, in the host's and the container's namespace alike.
		id1, err := api.create(ctx, toRepo)
		if err != nil {
			t.Fatalf("create through a symlink to the repository: %v", err)
		}
		if c := d.record(id1); c.Workspace != repo || c.Repo != repo || entryFor(porcelain(t, repo), c.Worktree) == nil {
			t.Errorf("create through %s = workspace %s, repo %s, worktree %s; want the canonical %s", toRepo, c.Workspace, c.Repo, c.Worktree, repo)
		}
		if err := proxiedGet(ctx, api, id1, "via-symlink"); err != nil {
			t.Error(err)
		}
	})
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}
