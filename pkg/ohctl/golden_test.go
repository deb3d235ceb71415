package ohctl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixtures is what the fake daemon answers: fixed records, so the human
// output is byte-for-byte stable.
func fixtures() (convs []store.Conversation, doctor control.DoctorReport, audit []store.AuditRecord) {
	running := store.Conversation{
		ID: "0b5e4c1a-1d2e-4f00-8a9b-0123456789ab", State: store.StateRunning, Runtime: "docker",
		Workspace: "/home/ana/src/shop", WorkingDir: "/var/lib/ohd/worktrees/0b5e4c1a-1d2e-4f00-8a9b-0123456789ab/shop",
		Repo: "/home/ana/src/shop", CommonDir: "/home/ana/src/shop/.git",
		Worktree: "/var/lib/ohd/worktrees/0b5e4c1a-1d2e-4f00-8a9b-0123456789ab/shop", AdminID: "shop",
		Branch: "openhands/0b5e4c1a-1d2e-4f00-8a9b-0123456789ab", StartPoint: "main", StartCommit: "2a6e6397bf927ddda0a1cafe06e4ad0ad048f45e",
		ContainerID: "4f1c2d3e4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff", ContainerName: "ohd-0b5e4c1a1d2e",
		Image: "ohd-agent:1.54.0", ImageID: "sha256:9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b", HostPort: 32768,
		UID: 1000, GID: 1000, BrokerEpoch: 2, BrokerDir: "/run/ohd/conversations/0b5e4c1a-1d2e-4f00-8a9b-0123456789ab",
		Grants:    store.Grants{Secrets: []string{"openai-key"}, Git: []string{"github.com/ana"}},
		CreatedAt: now.Add(-3 * time.Hour), UpdatedAt: now.Add(-time.Minute), LastActiveAt: now.Add(-90 * time.Second),
	}
	stopped := store.Conversation{
		ID: "7d3f0e2b-9a8c-4b1d-8e2f-fedcba987654", State: store.StateStopped, Runtime: "local",
		Workspace: "/srv/notes", WorkingDir: "/srv/notes", UID: 0, GID: 0, BrokerEpoch: 1,
		BrokerDir: "/run/ohd/conversations/7d3f0e2b-9a8c-4b1d-8e2f-fedcba987654",
		Notes:     []string{"the workspace is not a git repository: started without a worktree, the workspace is mounted at its own path"},
		CreatedAt: now.Add(-50 * time.Hour), UpdatedAt: now.Add(-49 * time.Hour), LastActiveAt: now.Add(-49 * time.Hour),
	}
	ended := store.Conversation{
		ID: "3c9a1f7e-5b2d-4e8f-9a01-23456789abcd", State: store.StateDeleted, Runtime: "docker",
		Workspace: "/home/ana/src/shop", WorkingDir: "/var/lib/ohd/worktrees/3c9a1f7e-5b2d-4e8f-9a01-23456789abcd/shop",
		Repo: "/home/ana/src/shop", Worktree: "/var/lib/ohd/worktrees/3c9a1f7e-5b2d-4e8f-9a01-23456789abcd/shop",
		Branch: "openhands/3c9a1f7e-5b2d-4e8f-9a01-23456789abcd", UID: 1000, GID: 1000,
		Removal:   &store.Removal{Done: true},
		CreatedAt: now.Add(-5 * time.Hour), UpdatedAt: now.Add(-4 * time.Hour), LastActiveAt: now.Add(-4 * time.Hour),
	}
	doctor = control.DoctorReport{Checks: []control.DoctorCheck{
		{Conversation: running.ID, Check: "worktree-host", Status: "ok", Detail: "registered, locked, not prunable; gitdir resolves on the host"},
		{Conversation: running.ID, Check: "worktree-container", Status: "ok", Detail: "git status in the container: ## openhands/0b5e4c1a-1d2e-4f00-8a9b-0123456789ab"},
		{Conversation: running.ID, Check: "container-hardening", Status: "ok", Detail: "user 1000:1000, all capabilities dropped, no-new-privileges, limits, port on 127.0.0.1 only"},
		{Conversation: running.ID, Check: "broker", Status: "ok", Detail: "answers on /run/ohd/conversations/0b5e4c1a-1d2e-4f00-8a9b-0123456789ab/broker.sock"},
		{Check: "stale-worktree", Status: "warn", Detail: "/home/ana/src/shop/.git: registration /tmp/conversation-worktrees/5725b8f5/workspace (branch openhands/5725b8f5) points at a path that does not exist on the host",
			Repair: "remove the registration /home/ana/src/shop/.git/worktrees/workspace; branch openhands/5725b8f5 and its commits stay"},
	}}
	audit = []store.AuditRecord{
		{Seq: 1, Time: now.Add(-10 * time.Minute), Source: "broker", Conversation: running.ID, Route: "GET /v1/secrets/{name}", Kind: "secret", Name: "openai-key", PeerPID: 4242, PeerUID: 1000, Allowed: true, Status: 200},
		{Seq: 2, Time: now.Add(-9 * time.Minute), Source: "broker", Conversation: running.ID, Route: "GET /v1/secrets/{name}", Kind: "secret", Name: "aws-key", PeerPID: 4242, PeerUID: 1000, Status: 403, Code: "not_granted"},
		{Seq: 3, Time: now.Add(-8 * time.Minute), Source: "broker", Conversation: running.ID, Route: "GET /v1/whoami", PeerPID: 4300, PeerUID: 1000, Status: 401, Code: "unauthenticated", Reason: "stale_epoch"},
	}
	return []store.Conversation{running, stopped, ended}, doctor, audit
}

// fakeDaemon serves the fixtures on a control socket.
func fakeDaemon(t *testing.T) string {
	t.Helper()
	convs, doctor, audit := fixtures()
	mux := http.NewServeMux()
	reply := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(v) }
	}
	mux.HandleFunc("GET /v1/conversations", reply(convs))
	mux.HandleFunc("GET /v1/conversations/{id}", func(w http.ResponseWriter, r *http.Request) {
		for _, c := range convs {
			if c.ID == r.PathValue("id") {
				_ = json.NewEncoder(w).Encode(c)
				return
			}
		}
		w.WriteHeader(404)
		_ = json.NewEncoder(w).Encode(control.Error{Message: "conversation " + r.PathValue("id") + ": conversation not found: see `ohctl ls`", Code: "not_found"})
	})
	mux.HandleFunc("GET /v1/doctor", reply(doctor))
	mux.HandleFunc("GET /v1/audit", reply(audit))
	dir, err := os.MkdirTemp("", "ohctl-golden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ohd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

// runOhctl runs ohctl in-process against sock.
func runOhctl(t *testing.T, sock string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), append([]string{"ohctl", "--socket", sock}, args...), Env{
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" }, Now: func() time.Time { return now },
	})
	return out.String(), errb.String(), code
}

func TestGoldenHumanOutput(t *testing.T) {
	sock := fakeDaemon(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"ls", []string{"ls"}, 0},
		{"ls-all", []string{"ls", "--all"}, 0},
		{"show", []string{"show", "0b5e4c1a-1d2e-4f00-8a9b-0123456789ab"}, 0},
		{"show-local", []string{"show", "7d3f0e2b-9a8c-4b1d-8e2f-fedcba987654"}, 0},
		{"doctor", []string{"doctor"}, 0},
		{"audit", []string{"audit"}, 0},
		{"show-unknown", []string{"show", "11111111-2222-4333-8444-555555555555"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runOhctl(t, sock, tc.args...)
			if code != tc.code {
				t.Fatalf("ohctl %v exit %d, want %d; stderr %q", tc.args, code, tc.code, stderr)
			}
			got := stdout + stderr
			path := filepath.Join("testdata", "golden", tc.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/ohctl -run Golden -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("ohctl %v output differs from %s (-want +got):\n%s", tc.args, path, diff)
			}
		})
	}
}

// keys returns the sorted keys of a JSON object.
func keys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestJSONShapes pins the --json output's shape: a key renamed or dropped
// breaks scripts, so it must break this test first.
func TestJSONShapes(t *testing.T) {
	sock := fakeDaemon(t)
	conversationKeys := []string{"admin_id", "branch", "broker_dir", "broker_epoch", "common_dir", "container_id", "container_name",
		"created_at", "gid", "grants", "host_port", "id", "image", "image_id", "last_active_at", "repo", "runtime", "start_commit",
		"start_point", "state", "uid", "updated_at", "working_dir", "workspace", "worktree"}
	var list []json.RawMessage
	out, _, _ := runOhctl(t, sock, "--json", "ls")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Fatalf("ls --json = %s, %v", out, err)
	}
	if diff := cmp.Diff(conversationKeys, keys(t, list[0])); diff != "" {
		t.Errorf("ls --json conversation keys (-want +got):\n%s", diff)
	}
	out, _, _ = runOhctl(t, sock, "--json", "show", "0b5e4c1a-1d2e-4f00-8a9b-0123456789ab")
	if diff := cmp.Diff(conversationKeys, keys(t, json.RawMessage(out))); diff != "" {
		t.Errorf("show --json keys (-want +got):\n%s", diff)
	}
	out, _, _ = runOhctl(t, sock, "--json", "doctor")
	if diff := cmp.Diff([]string{"checks"}, keys(t, json.RawMessage(out))); diff != "" {
		t.Errorf("doctor --json keys (-want +got):\n%s", diff)
	}
	var rep struct{ Checks []json.RawMessage }
	_ = json.Unmarshal([]byte(out), &rep)
	if diff := cmp.Diff([]string{"check", "detail", "repair", "status"}, keys(t, rep.Checks[4])); diff != "" {
		t.Errorf("doctor check keys (-want +got):\n%s", diff)
	}
	out, _, _ = runOhctl(t, sock, "--json", "audit")
	var recs []json.RawMessage
	if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) != 3 {
		t.Fatalf("audit --json = %s", out)
	}
	if diff := cmp.Diff([]string{"allowed", "code", "conversation", "peer_pid", "peer_uid", "reason", "route", "seq", "source", "status", "time"}, keys(t, recs[2])); diff != "" {
		t.Errorf("audit record keys (-want +got):\n%s", diff)
	}
}
