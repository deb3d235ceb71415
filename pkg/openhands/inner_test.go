package openhands

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEnvAndArgs(t *testing.T) {
	d := DirsOf("/var/lib/ohd/inner", "6f9619ff-8b86-d011-b42d-00c04fc964ff")
	want := []string{
		"HOME=/var/lib/ohd/inner/6f9619ff-8b86-d011-b42d-00c04fc964ff/persistence",
		"OH_PERSISTENCE_DIR=/var/lib/ohd/inner/6f9619ff-8b86-d011-b42d-00c04fc964ff/persistence/.openhands",
		"OH_CONVERSATIONS_PATH=/var/lib/ohd/inner/6f9619ff-8b86-d011-b42d-00c04fc964ff/conversations",
		"OH_BASH_EVENTS_DIR=/var/lib/ohd/inner/6f9619ff-8b86-d011-b42d-00c04fc964ff/bash_events",
		"OH_LEASE_TTL_SECONDS=0",
		"OH_VSCODE_BASE_PATH=/ohd/conversations/6f9619ff-8b86-d011-b42d-00c04fc964ff/vscode",
		"OH_CONVERSATION_RUNTIME=local",
		"GIT_TERMINAL_PROMPT=0",
	}
	if diff := cmp.Diff(want, Env(d)); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
	// Every directory a variable names is one the container gets.
	mounted := map[string]bool{}
	for _, dir := range d.Mounted() {
		mounted[dir] = true
	}
	for _, kv := range Env(d) {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(v, "/") && !mounted[v] && !mounted[filepath.Dir(v)] && k != VSCodeBasePathEnv {
			t.Errorf("Env sets %s, which is not one of Mounted %v (nor in one)", kv, d.Mounted())
		}
	}
	// The real server's profile router writes OH_PERSISTENCE_DIR/profiles
	// and a conversation's switch_profile reads ~/.openhands/profiles (ref
	// §10): one directory.
	env := map[string]string{}
	for _, kv := range Env(d) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["OH_PERSISTENCE_DIR"] != filepath.Join(env["HOME"], ".openhands") {
		t.Errorf("OH_PERSISTENCE_DIR=%s, want $HOME/.openhands (HOME=%s)", env["OH_PERSISTENCE_DIR"], env["HOME"])
	}
	if got := d.StateDir("6f9619ff-8b86-d011-b42d-00c04fc964ff"); got != d.Conversations+"/6f9619ff8b86d011b42d00c04fc964ff" {
		t.Errorf("StateDir = %s, want the id's hex under the conversations path", got)
	}
	if diff := cmp.Diff([]string{"--host", "0.0.0.0", "--port", "8000"}, Args(8000)); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
	for _, kv := range Env(d) {
		name, _, _ := strings.Cut(kv, "=")
		if err := CheckExtraEnv(name + "=x"); err == nil {
			t.Errorf("CheckExtraEnv(%s=x) = nil: an operator could replace a variable ohd sets", name)
		}
	}
}

func TestCheckExtraEnv(t *testing.T) {
	for _, tt := range []struct {
		kv   string
		want string // in the error; "" for none
	}{
		{"LOG_JSON=false", ""},
		{"DEBUG=1", ""},
		{"OH_ENABLE_VNC=false", ""},
		{"NO_EQUALS", "NAME=VALUE"},
		{"=x", "NAME=VALUE"},
		{"1BAD=x", "letters"},
		{"BAD-NAME=x", "letters"},
		{"OPENAI_API_KEY=sk-1", "looks like a secret"},
		{"github_token=x", "looks like a secret"},
		{"DB_PASSWORD=x", "looks like a secret"},
		{"MY_COOKIE_JAR=x", "looks like a secret"},
		{"OH_SECRET_KEY=x", "looks like a secret"},
		{"OH_SESSION_API_KEYS_1=x", "looks like a secret"},
		{"HOME=/root", "ohd sets"},
		{"OH_CONVERSATIONS_PATH=/x", "ohd sets"},
		{"GIT_CONFIG_COUNT=0", "ohd sets"},
		{"OHD_BROKER_SOCKET=/x", "ohd sets"},
		{"PATH=/bin", "ohd sets"},
	} {
		err := CheckExtraEnv(tt.kv)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckExtraEnv(%q) = %v, want %q", tt.kv, err, tt.want)
		}
		if err != nil && strings.Contains(tt.kv, "sk-1") && strings.Contains(err.Error(), "sk-1") {
			t.Errorf("CheckExtraEnv(%q) error carries the value: %v", tt.kv, err)
		}
	}
}

func TestIsSecretKey(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "X-Session-API-Key": true, "x-api-key": true, "Cookie": true,
		"AWS_CREDENTIALS": true, "password": true, "client_secret": true, "access_token": true,
		"Content-Type": false, "LOG_JSON": false, "X-Request-Id": false,
	} {
		if got := IsSecretKey(name); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestReadInfo renders a persisted conversation as the docker runtime's
// metadata reads do (reference §5): base_state.json plus meta.json's
// fields, the real status, every secret redacted.
func TestReadInfo(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conv")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	token := NewFernet("k").encrypt([]byte("sk-test-123"), time.Unix(1767225600, 0), make([]byte, 16))
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadInfo(root, "conv"); err != ErrNoState {
		t.Errorf("ReadInfo without meta.json = %v, want ErrNoState", err)
	}
	write(MetaFile, `{"id":"a","title":"T","created_at":"2026-01-01T00:00:00Z","secrets":{"S":{"kind":"StaticSecret","value":"`+token+`"}},"workspace":{"kind":"LocalWorkspace","working_dir":"/w"}}`)
	write(BaseStateFile, `{"id":"a","execution_status":"stuck","max_iterations":12345678901234,"agent":{"llm":{"api_key":"`+token+`"}},"secret_registry":{"secret_sources":{"P":{"kind":"StaticSecret","value":"plaintext-value"},"L":{"kind":"LookupSecret","url":"/x","headers":{"X-Session-API-Key":"outer","Accept":"text/plain"}}}}}`)
	raw, err := ReadInfo(root, "conv")
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{token, "plaintext-value", `"outer"`} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("ReadInfo = %s: carries a secret %q", raw, leak)
		}
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["title"] != "T" || got["execution_status"] != "stuck" || Status(raw) != "stuck" || got["max_iterations"] != json.Number("12345678901234") {
		t.Errorf("ReadInfo = %s: want title T, status stuck, max_iterations exact", raw)
	}
	if _, ok := got["secrets"]; ok {
		t.Errorf("ReadInfo = %s: carries meta.json's secrets", raw)
	}
	if !strings.Contains(string(raw), `"Accept":"text/plain"`) || !strings.Contains(string(raw), `"working_dir":"/w"`) {
		t.Errorf("ReadInfo = %s: lost a non-secret field", raw)
	}
}

// TestReadInfoRefusesSymlinks plants what an agent could: the
// conversation's directory or its meta.json as a symlink to a host file
// ohd (root) can read. ReadInfo must not follow either.
func TestReadInfoRefusesSymlinks(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(t.TempDir(), "host-secret.json")
	if err := os.WriteFile(secret, []byte(`{"id":"host","title":"HOST-ONLY"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(root, "linked-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "conv"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "conv", MetaFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(filepath.Dir(secret), MetaFile)); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"conv", "linked-dir"} {
		raw, err := ReadInfo(root, rel)
		if err == nil || strings.Contains(string(raw), "HOST-ONLY") {
			t.Errorf("ReadInfo(%s) = %s, %v; want an error, never the host file", rel, raw, err)
		}
	}
}

// FuzzReadInfo feeds ReadInfo files an agent could write: it must not
// panic, and a Fernet token in them never reaches its answer.
func FuzzReadInfo(f *testing.F) {
	tok := NewFernet("k").encrypt([]byte("v"), time.Unix(1767225600, 0), make([]byte, 16))
	f.Add(`{"id":"a"}`, `{"execution_status":"idle"}`)
	f.Add(`{"id":"a","title":"`+tok+`"}`, `{"secret_registry":{"secret_sources":{"x":{"value":"`+tok+`"}}}}`)
	f.Add(`{"metrics":[1,{"a":"`+tok+`"}]}`, `[]`)
	f.Fuzz(func(t *testing.T, meta, base string) {
		root := t.TempDir()
		dir := filepath.Join(root, "c")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(dir, MetaFile), []byte(meta), 0o600)
		_ = os.WriteFile(filepath.Join(dir, BaseStateFile), []byte(base), 0o600)
		raw, err := ReadInfo(root, "c")
		if err == nil && strings.Contains(string(raw), tok) {
			t.Fatalf("ReadInfo = %s: carries a token", raw)
		}
	})
}

func TestAppendSystemMessageSuffix(t *testing.T) {
	g := WorktreeGuidance("/src/repo", "/wt/id/repo", "/wt/id/repo/sub", "openhands/id")
	if !strings.HasPrefix(g, "This conversation uses a dedicated git worktree.\n- Original workspace: /src/repo\n- Worktree root: /wt/id/repo\n- Active workspace: /wt/id/repo/sub\n- Branch: openhands/id\n") {
		t.Errorf("WorktreeGuidance = %q", g)
	}
	for _, tt := range []struct {
		body, want string
		ok         bool
	}{
		{`{"agent":{"kind":"Agent"}}`, `{"agent":{"agent_context":{"system_message_suffix":"G"},"kind":"Agent"}}`, true},
		{`{"agent":{"agent_context":{"system_message_suffix":"  be kind \n","skills":[]}}}`, `{"agent":{"agent_context":{"skills":[],"system_message_suffix":"be kind\n\nG"}}}`, true},
		{`{"agent_settings":{"agent_context":null,"llm":{"model":"m"}}}`, `{"agent_settings":{"agent_context":{"system_message_suffix":"G"},"llm":{"model":"m"}}}`, true},
		{`{"agent_profile_id":"p"}`, `{"agent_profile_id":"p"}`, false},
		{`{"agent":"weird"}`, `{"agent":"weird"}`, false},
	} {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tt.body), &fields); err != nil {
			t.Fatal(err)
		}
		ok := AppendSystemMessageSuffix(fields, "G")
		got, _ := json.Marshal(fields)
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("AppendSystemMessageSuffix(%s) = %s, %v; want %s, %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
}
