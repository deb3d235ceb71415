package broker_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
)

// gitEnv opens a conversation with git grants: every path on
// git.example.com, and code.example.org only under acme/. other.example.net
// has a credential but is not granted.
func gitEnv(t *testing.T) (*env, broker.Endpoint) {
	t.Helper()
	e := newEnv(t)
	ep := e.open(broker.Conversation{
		ID: "conv-g", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Git: []string{"git.example.com", "code.example.org/acme"}, GitOptions: helperOpts("git.example.com", "code.example.org/acme")},
	})
	e.be.SetGitCredential("git.example.com", broker.GitCredential{Username: "bot", Password: []byte("pw-" + marker + "-1")})
	e.be.SetGitCredential("code.example.org", broker.GitCredential{Username: "acme-bot", Password: []byte("pw-" + marker + "-2")})
	e.be.SetGitCredential("other.example.net", broker.GitCredential{Username: "x", Password: []byte("pw-" + marker + "-3")})
	return e, ep
}

// TestGitCredentialWithGit runs the real git with the test binary as its
// credential helper (the same code ohctl git-credential runs).
func TestGitCredentialWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git is not installed")
	}
	e, ep := gitEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fill := func(t *testing.T, input string, useHTTPPath bool) (string, error) {
		t.Helper()
		cmd := exec.Command("git",
			"-c", "credential.helper="+exe,
			"-c", "credential.useHttpPath="+map[bool]string{true: "true", false: "false"}[useHTTPPath],
			"credential", "fill")
		cmd.Env = append(testenv.GitEnv(),
			helperEnv+"=git",
			broker.EnvSocket+"="+ep.Socket,
			broker.EnvTokenFile+"="+ep.TokenFile,
		)
		cmd.Stdin = strings.NewReader(input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		e.watch(stderr.String())
		return stdout.String(), err
	}
	cases := []struct {
		name        string
		input       string
		useHTTPPath bool
		password    string // "" means git must get none
	}{
		{name: "granted host", input: "url=https://git.example.com/any/repo.git\n", password: "pw-" + marker + "-1"},
		{name: "granted host, with path", input: "url=https://git.example.com/any/repo.git\n", useHTTPPath: true, password: "pw-" + marker + "-1"},
		{name: "granted host, upper case", input: "url=https://GIT.EXAMPLE.COM/x\n", password: "pw-" + marker + "-1"},
		{name: "host with a credential, not granted", input: "url=https://other.example.net/x.git\n"},
		{name: "unknown host", input: "url=https://unknown.example/x.git\n"},
		{name: "path prefix granted", input: "url=https://code.example.org/acme/widgets.git\n", useHTTPPath: true, password: "pw-" + marker + "-2"},
		{name: "path prefix itself", input: "url=https://code.example.org/acme\n", useHTTPPath: true, password: "pw-" + marker + "-2"},
		{name: "path prefix is not a segment boundary", input: "url=https://code.example.org/acme-corp/x.git\n", useHTTPPath: true},
		{name: "other path on a prefix-granted host", input: "url=https://code.example.org/other/x.git\n", useHTTPPath: true},
		{name: "prefix grant without useHttpPath", input: "url=https://code.example.org/acme/widgets.git\n", useHTTPPath: false},
		{name: "dot-dot out of the prefix", input: "protocol=https\nhost=code.example.org\npath=acme/../secret/x.git\n", useHTTPPath: true},
		{name: "missing host", input: "protocol=https\n"},
		{name: "empty host", input: "protocol=https\nhost=\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := fill(t, tc.input, tc.useHTTPPath)
			if tc.password == "" {
				if err == nil || strings.Contains(out, "password=") {
					t.Errorf("git credential fill %q = %q, %v; want a failure and no password", tc.input, out, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("git credential fill %q: %v", tc.input, err)
			}
			if !strings.Contains(out, "\npassword="+tc.password+"\n") {
				t.Errorf("git credential fill %q = %q, want password %q", tc.input, out, tc.password)
			}
		})
	}
	// store and erase are acknowledged and change nothing.
	for _, action := range []string{"approve", "reject"} {
		cmd := exec.Command("git", "-c", "credential.helper="+exe, "credential", action)
		cmd.Env = append(testenv.GitEnv(), helperEnv+"=git", broker.EnvSocket+"="+ep.Socket, broker.EnvTokenFile+"="+ep.TokenFile)
		cmd.Stdin = strings.NewReader("protocol=https\nhost=git.example.com\nusername=bot\npassword=other-" + marker + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("git credential %s: %v: %s", action, err, out)
		}
	}
	if out, err := fill(t, "url=https://git.example.com/x\n", false); err != nil || !strings.Contains(out, "password=pw-"+marker+"-1\n") {
		t.Errorf("after approve and reject, git credential fill = %q, %v; want the operator's password", out, err)
	}
}

// TestGitCredentialRejects posts malformed requests straight to the broker.
func TestGitCredentialRejects(t *testing.T) {
	e, ep := gitEnv(t)
	tok := e.token("conv-g", 1)
	cases := []struct {
		name   string
		action string
		body   string
		status int
		code   string
	}{
		{name: "CR in a value", body: "protocol=https\nhost=git.example.com\r\n", status: 400, code: "bad_request"},
		{name: "CR inside a host", body: "protocol=https\nhost=git.exa\rmple.com\n", status: 400, code: "bad_request"},
		{name: "NUL in a value", body: "protocol=https\nhost=git.example.com\x00.evil\n", status: 400, code: "bad_request"},
		{name: "LF splitting a value", body: "protocol=https\nhost=git.example.com\nevil.example\n", status: 400, code: "bad_request"},
		{name: "missing host", body: "protocol=https\npath=x\n", status: 400, code: "bad_request"},
		{name: "empty host", body: "protocol=https\nhost=\n", status: 400, code: "bad_request"},
		{name: "url without a host", body: "url=https:///acme/x.git\n", status: 400, code: "bad_request"},
		{name: "file url", body: "url=file:///etc/passwd\n", status: 400, code: "bad_request"},
		{name: "duplicate host", body: "protocol=https\nhost=evil.example\nhost=git.example.com\n", status: 400, code: "bad_request"},
		{name: "url and host disagree", body: "url=https://evil.example/\nhost=git.example.com\n", status: 400, code: "bad_request"},
		{name: "data after the blank line", body: "protocol=https\nhost=git.example.com\n\nhost=evil\n", status: 400, code: "bad_request"},
		{name: "ssh protocol", body: "protocol=ssh\nhost=git.example.com\n", status: 400, code: "bad_request"},
		{name: "unknown action", action: "fill", body: "protocol=https\nhost=git.example.com\n", status: 400, code: "bad_request"},
		{name: "oversize", body: "protocol=https\nhost=git.example.com\nwwwauth[]=" + strings.Repeat("a", 64<<10) + "\n", status: 413, code: "too_large"},
		{name: "unknown keys are ignored", body: "protocol=https\nhost=git.example.com\ncapability[]=authtype\ncapability[]=state\nfuture_key=1\n", status: 200},
		{name: "store is acknowledged", action: "store", body: "protocol=https\nhost=git.example.com\nusername=bot\npassword=new-" + marker + "\n", status: 200},
		{name: "erase of an ungranted host", action: "erase", body: "protocol=https\nhost=other.example.net\n", status: 403, code: "not_granted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			action := tc.action
			if action == "" {
				action = "get"
			}
			n := e.auditCount()
			resp, body := e.request(ep.Socket, http.MethodPost, "/v1/git-credential?action="+action, authed(tok), strings.NewReader(tc.body))
			if resp.StatusCode != tc.status {
				t.Fatalf("POST %q = %d %s, want %d", tc.body, resp.StatusCode, body, tc.status)
			}
			if tc.code != "" && !bytes.Contains(body, []byte(`"code":"`+tc.code+`"`)) {
				t.Errorf("answer %s, want code %s", body, tc.code)
			}
			if tc.action == "store" && len(body) != 0 {
				t.Errorf("store answered %q, want nothing", body)
			}
			rec := e.audit(n + 1)
			if rec.Allowed != (tc.status == 200) || rec.Status != tc.status || rec.Kind != "git" {
				t.Errorf("audit record %+v, want status %d", rec, tc.status)
			}
		})
	}
	// store changed nothing.
	c := e.client(ep)
	got, err := c.GitCredential(context.Background(), "get", []byte("protocol=https\nhost=git.example.com\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "username=bot\npassword=pw-" + marker + "-1\n"; string(got) != want {
		t.Errorf("get after store = %q, want %q", got, want)
	}
}

func TestParseGitCredential(t *testing.T) {
	cases := []struct {
		in   string
		want broker.GitRequest
		err  bool
	}{
		{in: "protocol=https\nhost=github.com\n", want: broker.GitRequest{Protocol: "https", Host: "github.com"}},
		{in: "protocol=https\nhost=GitHub.com:8443\npath=/acme/x.git/\nusername=me\n\n", want: broker.GitRequest{Protocol: "https", Host: "github.com:8443", Path: "acme/x.git", Username: "me"}},
		{in: "url=https://me@github.com/acme/x.git\n", want: broker.GitRequest{Protocol: "https", Host: "github.com", Path: "acme/x.git", Username: "me"}},
		{in: "protocol=http\nhost=[::1]:8080\n", want: broker.GitRequest{Protocol: "http", Host: "[::1]:8080"}},
		{in: "protocol=https\nhost=github.com", want: broker.GitRequest{Protocol: "https", Host: "github.com"}},
		{in: "protocol=https\nhost=github.com\nwwwauth[]=Basic realm=\"x\"\nwwwauth[]=Bearer\n", want: broker.GitRequest{Protocol: "https", Host: "github.com"}},
		{in: "", err: true},
		{in: "host=github.com\n", err: true},
		{in: "protocol=https\nhost=git hub.com\n", err: true},
		{in: "protocol=https\nhost=github.com/x\n", err: true},
		{in: "protocol=https\nhost=github.com:\n", err: true},
		{in: "protocol=https\nhost=github.com:99999x\n", err: true},
		{in: "protocol=https\nhost=[::1\n", err: true},
		{in: "protocol=https\nHost=github.com\n", err: true},
		{in: "protocol=https\n=github.com\n", err: true},
		{in: "protocol=https\nhost=github.com\npath=a/./b\n", err: true},
		{in: "protocol=https\nhost=github.com\nusername=a\nusername=b\n", err: true},
		{in: "url=https://github.com/x\nprotocol=http\n", err: true},
		{in: "url=::\n", err: true},
		{in: "url=mailto:x@y\n", err: true},
	}
	for _, tc := range cases {
		got, err := broker.ParseGitCredential([]byte(tc.in))
		if tc.err {
			if err == nil {
				t.Errorf("ParseGitCredential(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseGitCredential(%q) error = %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseGitCredential(%q) mismatch (-want +got):\n%s", tc.in, diff)
		}
	}
}

func FuzzGitCredential(f *testing.F) {
	for _, s := range []string{
		"protocol=https\nhost=github.com\n",
		"protocol=https\nhost=github.com\npath=acme/x.git\nusername=me\n\n",
		"url=https://me@github.com:8443/acme/x.git\n",
		"protocol=https\nhost=github.com\ncapability[]=authtype\nwwwauth[]=Basic\n",
		"protocol=https\nhost=git\rhub.com\n",
		"protocol=https\nhost=\n",
		"url=https:///x\n",
		"host=a\nhost=b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := broker.ParseGitCredential(in)
		if err != nil {
			return
		}
		if req.Host == "" || (req.Protocol != "https" && req.Protocol != "http") {
			t.Fatalf("ParseGitCredential(%q) = %+v: accepted without a host or protocol", in, req)
		}
		for _, v := range []string{req.Protocol, req.Host, req.Path, req.Username} {
			if strings.ContainsAny(v, "\x00\r\n") {
				t.Fatalf("ParseGitCredential(%q) = %+v: CR, LF or NUL in a value", in, req)
			}
		}
		if strings.ContainsAny(req.Host, "/@ ") || req.Host != strings.ToLower(req.Host) {
			t.Fatalf("ParseGitCredential(%q) host %q", in, req.Host)
		}
		for _, seg := range strings.Split(req.Path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("ParseGitCredential(%q) path %q has a dot segment", in, req.Path)
			}
		}
	})
}

// TestStaticHelperInChroot runs the credential helper built with
// CGO_ENABLED=0 in a chroot that holds only the helper and the broker
// directory (no /etc, no /dev, no DNS), as the conversation's uid, the
// way it runs in a minimal container.
func TestStaticHelperInChroot(t *testing.T) {
	testenv.RequireRoot(t)
	helper := testenv.GoBuild(t, "./pkg/broker/testdata/credhelper", "CGO_ENABLED=0")
	root := testenv.TempDir(t)
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "helper"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *broker.Options) { o.RuntimeDir = filepath.Join(root, "r") })
	uid := testenv.UnprivilegedUID
	e.open(broker.Conversation{ID: "conv-s", UID: uid, GID: uid, Epoch: 1, Grants: broker.Grants{Git: []string{"git.example.com"}, GitOptions: helperOpts("git.example.com")}})
	e.be.SetGitCredential("git.example.com", broker.GitCredential{Username: "bot", Password: []byte("pw-" + marker)})
	if err := os.Chmod(filepath.Join(root, "r"), 0o711); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string) (string, error) {
		cmd := testenv.AsUser(exec.Command("/helper", "get"), uid, uid)
		cmd.SysProcAttr.Chroot = root
		cmd.Dir = "/"
		cmd.Env = []string{
			broker.EnvSocket + "=/r/conversations/conv-s/broker.sock",
			broker.EnvTokenFile + "=/r/conversations/conv-s/token",
		}
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = errors.Join(err, errors.New(stderr.String()))
		}
		return string(out), err
	}
	out, err := run("protocol=https\nhost=git.example.com\n")
	if err != nil {
		t.Fatalf("helper in chroot: %v", err)
	}
	if want := "username=bot\npassword=pw-" + marker + "\n"; out != want {
		t.Errorf("helper in chroot wrote %q, want %q", out, want)
	}
	out, err = run("protocol=https\nhost=other.example\n")
	if err != nil || out != "" {
		t.Errorf("helper in chroot for an ungranted host = %q, %v; want nothing and success", out, err)
	}
}

// TestGitCredentialStoredNewline: a stored password with a newline would
// let its tail inject attributes into git's answer; the broker refuses it
// (500) and says so in the log without the value (checked by the env's
// hygiene check).
func TestGitCredentialStoredNewline(t *testing.T) {
	e := newEnv(t)
	ep := e.open(broker.Conversation{ID: "conv-n", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Git: []string{"git.example.com"}, GitOptions: helperOpts("git.example.com")}})
	e.be.SetGitCredential("git.example.com", broker.GitCredential{Username: "bot", Password: []byte("pw-" + marker + "\nhost=evil.example")})
	resp, body := e.request(ep.Socket, http.MethodPost, "/v1/git-credential?action=get", authed(e.token("conv-n", 1)),
		strings.NewReader("protocol=https\nhost=git.example.com\n"))
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"code":"internal"`) {
		t.Errorf("stored password with a newline = %d %s, want 500 internal", resp.StatusCode, body)
	}
	if !strings.Contains(e.log.String(), "git.example.com") {
		t.Errorf("log does not name the host with the bad credential:\n%s", e.log.String())
	}
}

// TestGitCredentialRefusalSaysSo: real git, with the helper, for a host
// that is not granted and for a username other than the configured one:
// git fails (no prompt: GIT_TERMINAL_PROMPT=0, as in containers) and its
// stderr carries one line of ohd's that names the host and says what to
// do, instead of only git's "could not read Username".
func TestGitCredentialRefusalSaysSo(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git is not installed")
	}
	_, ep := gitEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fill := func(input string) (string, string, error) {
		cmd := exec.Command("git", "-c", "credential.helper="+exe, "credential", "fill")
		cmd.Env = append(testenv.GitEnv(), helperEnv+"=git", "GIT_TERMINAL_PROMPT=0",
			broker.EnvSocket+"="+ep.Socket, broker.EnvTokenFile+"="+ep.TokenFile, "OHD_CONVERSATION_ID=conv-g")
		cmd.Stdin = strings.NewReader(input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	ohdLines := func(stderr string) []string {
		var out []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, "ohd: ") {
				out = append(out, l)
			}
		}
		return out
	}
	for _, tc := range []struct{ name, input, want string }{
		{"ungranted host", "url=https://other.example.net/x.git\n", "ohd: other.example.net is not granted to this conversation; on the host run: ohctl grant conv-g git other.example.net"},
		{"username not the configured one", "url=https://someone@git.example.com/x.git\n", "ohd: no credential for git.example.com: the username in the URL is not the one configured for this host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := fill(tc.input)
			if err == nil || strings.Contains(out, "password=") {
				t.Errorf("git credential fill %q = %q, %v; want a failure without a password", tc.input, out, err)
			}
			lines := ohdLines(stderr)
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
				t.Errorf("stderr of git = %q, want exactly one line starting %q", stderr, tc.want)
			}
			if strings.Contains(stderr, marker) {
				t.Errorf("stderr holds a value: %q", stderr)
			}
		})
	}
	// The configured username itself is served.
	if out, _, err := fill("url=https://bot@git.example.com/x.git\n"); err != nil || !strings.Contains(out, "password=pw-"+marker+"-1") {
		t.Errorf("with the configured username: %q, %v", out, err)
	}
}
