package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

func TestExec(t *testing.T) {
	for _, prog := range []string{"sh", "pwd", "cat", "sleep"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.Missing(t, "%s not installed: %v", prog, err)
		}
	}
	ts := newTestServer(t, Config{})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	c := ts.create(t, dir, "")
	path := "/api/conversations/" + c.ID + "/exec"

	tests := []struct {
		name string
		req  map[string]any
		want execResponse
	}{
		{"argv in working_dir", map[string]any{"command": []string{"pwd"}}, execResponse{Stdout: dir + "\n"}},
		{"cwd", map[string]any{"command": []string{"pwd"}, "cwd": other}, execResponse{Stdout: other + "\n"}},
		{"argv is not a shell", map[string]any{"command": []string{"sh", "-c", `printf '%s' "$1"`, "x", "a b;c"}}, execResponse{Stdout: "a b;c"}},
		{"shell", map[string]any{"shell": "echo out; echo err >&2; exit 3"}, execResponse{Stdout: "out\n", Stderr: "err\n", ExitCode: 3}},
		{"env", map[string]any{"shell": `printf %s "$STANDIN_TEST_VAR"`, "env": map[string]string{"STANDIN_TEST_VAR": "v=1"}}, execResponse{Stdout: "v=1"}},
		{"stdin", map[string]any{"command": []string{"cat"}, "stdin": "fed"}, execResponse{Stdout: "fed"}},
		{"signal", map[string]any{"shell": "kill -9 $$"}, execResponse{ExitCode: 137}},
		{"timeout", map[string]any{"command": []string{"sleep", "30"}, "timeout_seconds": 0.2}, execResponse{ExitCode: 124, TimedOut: true, Stderr: "standin: timed out after 200ms\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(tt.req)
			code, body := ts.do(t, "POST", path, string(b))
			if code != 200 {
				t.Fatalf("exec %s = %d %s", b, code, body)
			}
			if got := mustJSON[execResponse](t, body); got != tt.want {
				t.Errorf("exec %s = %+v, want %+v", b, got, tt.want)
			}
		})
	}

	t.Run("not found", func(t *testing.T) {
		code, body := ts.do(t, "POST", path, `{"command":["/no/such/program"]}`)
		got := mustJSON[execResponse](t, body)
		if code != 200 || got.ExitCode != 127 || !strings.Contains(got.Stderr, "/no/such/program") {
			t.Errorf("exec of a missing program = %d %+v, want exit_code 127", code, got)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		f := filepath.Join(other, "data")
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, body := ts.do(t, "POST", path, `{"command":["`+f+`"]}`)
		got := mustJSON[execResponse](t, body)
		if code != 200 || got.ExitCode != 126 {
			t.Errorf("exec of a non-executable file = %d %+v, want exit_code 126", code, got)
		}
	})

	bad := []struct{ name, path, body string }{
		{"neither", path, `{}`},
		{"both", path, `{"command":["true"],"shell":"true"}`},
		{"relative cwd", path, `{"command":["true"],"cwd":"rel"}`},
		{"negative timeout", path, `{"command":["true"],"timeout_seconds":-1}`},
		{"empty program", path, `{"command":[""]}`},
		{"not JSON", path, `nope`},
	}
	for _, tt := range bad {
		if code, body := ts.do(t, "POST", tt.path, tt.body); code != 422 {
			t.Errorf("exec %s (%s) = %d %s, want 422", tt.body, tt.name, code, body)
		}
	}
	if code, _ := ts.do(t, "POST", "/api/conversations/"+newUUID()+"/exec", `{"command":["true"]}`); code != 404 {
		t.Errorf("exec in an unknown conversation = %d, want 404", code)
	}
}

func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 4}
	for _, s := range []string{"ab", "cde", "f"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got, want := b.String(), "abcd\n[standin: output truncated]\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
