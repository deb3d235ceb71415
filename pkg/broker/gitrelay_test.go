package broker_test

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/gitserver"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/gitproto"
)

const gitToken = "ghs_" + marker + "_relaytoken"

// gitRelay is a broker serving conversation conv-g with a git grant on a
// real git http-backend, and a Relay in front of it as ohctl inner-exec
// serves it (its Host check satisfied whatever port it listens on).
type gitRelay struct {
	e     *env
	ep    broker.Endpoint
	srv   *gitserver.Server
	relay string // http://127.0.0.1:port
	conv  broker.Conversation
	home  string
}

func newGitRelay(t *testing.T, opts gitserver.Options, grants ...string) *gitRelay {
	t.Helper()
	if opts.Token == "" {
		opts.Token = gitToken
	}
	if opts.Username == "" && !opts.Bearer {
		opts.Username = "x-access-token"
	}
	g := &gitRelay{e: newEnv(t), srv: gitserver.Start(t, opts), home: t.TempDir()}
	g.e.be.SetGitCredential(g.srv.Host, broker.GitCredential{Username: opts.Username, Password: []byte(opts.Token), Scheme: "http", Bearer: opts.Bearer})
	if len(grants) == 0 {
		grants = []string{g.srv.Host}
	}
	for i := range grants {
		grants[i] = strings.ReplaceAll(grants[i], "HOST", g.srv.Host)
	}
	g.conv = broker.Conversation{ID: "conv-g", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{Git: grants}}
	g.ep = g.e.open(g.conv)
	g.relay = startRelay(t, g.e, g.ep)
	return g
}

// startRelay serves a Relay to ep's broker on loopback and returns its
// URL.
func startRelay(t *testing.T, e *env, ep broker.Endpoint) string {
	t.Helper()
	rl := broker.NewRelay(e.client(ep))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = broker.RelayAddr
		rl.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// peer opens another conversation, id, with g's grants on the same
// broker and git host, behind a relay of its own.
func (g *gitRelay) peer(t *testing.T, id string) *gitRelay {
	t.Helper()
	h := &gitRelay{e: g.e, srv: g.srv, conv: g.conv, home: t.TempDir()}
	h.conv.ID = id
	h.ep = g.e.open(h.conv)
	h.relay = startRelay(t, g.e, h.ep)
	return h
}

func (g *gitRelay) setPush(name string, patterns ...string) {
	g.conv.Grants.GitOptions = map[string]broker.GitOptions{strings.ReplaceAll(name, "HOST", g.srv.Host): {Push: patterns}}
	g.e.be.SetConversation(g.conv)
}

// remote is the URL git inside would use; the insteadOf of the container
// configuration sends it through the relay.
func (g *gitRelay) remote(repo string) string { return "http://" + g.srv.Host + "/" + repo }

// git runs the host's git as the container's would: no credential
// helper, the relay's insteadOf, and traces on; it returns the combined
// output and the error.
func (g *gitRelay) git(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+g.home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_TRACE_CURL=1", "GIT_TRACE_PACKET=1", "GIT_TRACE_CURL_NO_DATA=1",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com",
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=url."+g.relay+"/git/"+g.srv.Host+"/.insteadOf", "GIT_CONFIG_VALUE_0=http://"+g.srv.Host+"/",
		"GIT_CONFIG_KEY_1=credential.helper", "GIT_CONFIG_VALUE_1=",
	)
	out, err := cmd.CombinedOutput()
	g.e.watch(string(out))
	if strings.Contains(string(out), gitToken) {
		t.Errorf("git's output (traces included) holds the token")
	}
	return string(out), err
}

func (g *gitRelay) mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := g.git(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, tail(out))
	}
	return out
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

// seed makes repo on the server with a main branch of two commits, a
// branch "other" and a tag v1, pushed on the file system (not through
// the relay).
func (g *gitRelay) seed(t *testing.T, repo string) {
	t.Helper()
	bare := g.srv.Repo(t, repo)
	work := t.TempDir()
	gitserver.Git(t, work, "init", "-q", "-b", "main")
	for i := 0; i < 2; i++ {
		if err := os.WriteFile(filepath.Join(work, fmt.Sprintf("f%d.txt", i)), bytes.Repeat([]byte{byte('a' + i)}, 5000), 0o644); err != nil {
			t.Fatal(err)
		}
		gitserver.Git(t, work, "add", ".")
		gitserver.Git(t, work, "commit", "-q", "-m", fmt.Sprintf("c%d", i))
	}
	gitserver.Git(t, work, "tag", "v1")
	gitserver.Git(t, work, "branch", "other")
	gitserver.Git(t, work, "push", "-q", bare, "main", "other", "v1")
}

// checkAuthorizations: the server saw the token in every request it was
// sent (the relay injected it) and nothing else.
func (g *gitRelay) checkAuthorizations(t *testing.T) {
	t.Helper()
	for _, a := range g.srv.Authorizations() {
		if a == "" {
			t.Errorf("the git host got a request without the credential")
		}
	}
}

// TestGitRelayCloneFetchPush: with a git grant, git reaches a real git
// http-backend through the relay with no credential of its own: clone
// (protocol v2 and v0), fetch, shallow and partial clone, and a push to a
// branch under refs/heads/openhands/; the host saw the operator's
// credential on every request; git's traces hold no token.
func TestGitRelayCloneFetchPush(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	dir := t.TempDir()
	for _, v := range []string{"2", "0"} {
		out := g.mustGit(t, dir, "-c", "protocol.version="+v, "clone", g.remote("acme/widgets.git"), "v"+v)
		if v == "2" && !strings.Contains(out, "git< version 2") {
			t.Errorf("protocol v2 clone did not speak v2:\n%s", tail(out))
		}
		if _, err := os.Stat(filepath.Join(dir, "v"+v, "f1.txt")); err != nil {
			t.Fatalf("clone v%s: %v", v, err)
		}
	}
	work := filepath.Join(dir, "v2")
	g.mustGit(t, work, "fetch", "origin")
	g.mustGit(t, dir, "clone", "--depth", "1", g.remote("acme/widgets.git"), "shallow")
	if n := strings.TrimSpace(gitserver.Git(t, filepath.Join(dir, "shallow"), "rev-list", "--count", "HEAD")); n != "1" {
		t.Errorf("shallow clone has %s commits", n)
	}
	g.mustGit(t, dir, "clone", "--filter=blob:none", g.remote("acme/widgets.git"), "partial")
	if cfg := gitserver.Git(t, filepath.Join(dir, "partial"), "config", "remote.origin.promisor"); strings.TrimSpace(cfg) != "true" {
		t.Errorf("partial clone is not a promisor: %q", cfg)
	}
	// Over http.postBuffer (1 MiB) and incompressible: git probes with a
	// lone flush first, then sends the pack chunked.
	big := make([]byte, 3<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "new.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	gitserver.Git(t, work, "add", ".")
	gitserver.Git(t, work, "commit", "-q", "-m", "agent work")
	g.mustGit(t, work, "push", "origin", "HEAD:refs/heads/openhands/fix-1")
	if got := gitserver.Git(t, filepath.Join(g.srv.Root, "acme/widgets.git"), "rev-parse", "refs/heads/openhands/fix-1"); strings.TrimSpace(got) != strings.TrimSpace(gitserver.Git(t, work, "rev-parse", "HEAD")) {
		t.Errorf("the push did not land: %s", got)
	}
	g.checkAuthorizations(t)
	rec := lastPush(t, g.e)
	if !rec.Allowed || !strings.Contains(rec.Detail, "allowed=refs/heads/openhands/fix-1") {
		t.Errorf("push audit: %+v", rec)
	}
}

// TestGitRelayBearer: a host configured for bearer tokens gets
// "Authorization: Bearer <token>".
func TestGitRelayBearer(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{Bearer: true})
	g.seed(t, "r.git")
	g.mustGit(t, t.TempDir(), "clone", g.remote("r.git"), "c")
	g.checkAuthorizations(t)
}

func lastPush(t *testing.T, e *env) broker.AuditRecord {
	t.Helper()
	recs := e.be.AuditRecords()
	for i := len(recs) - 1; i >= 0; i-- {
		if strings.HasPrefix(recs[i].Detail, "push ") {
			return recs[i]
		}
	}
	t.Fatal("no push audited")
	return broker.AuditRecord{}
}

// pushRefused pushes refspec from a fresh clone and checks that git
// printed the relay's rejection for ref, that nothing changed on the
// host, and that the refusal was audited.
func (g *gitRelay) pushRefused(t *testing.T, want string, args ...string) {
	t.Helper()
	dir := t.TempDir()
	g.mustGit(t, dir, "clone", "-q", g.remote("acme/widgets.git"), "w")
	work := filepath.Join(dir, "w")
	if err := os.WriteFile(filepath.Join(work, "evil.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitserver.Git(t, work, "add", ".")
	gitserver.Git(t, work, "commit", "-q", "-m", "evil")
	bare := filepath.Join(g.srv.Root, "acme/widgets.git")
	before := gitserver.Git(t, bare, "for-each-ref")
	out, err := g.git(t, work, append([]string{"push"}, args...)...)
	if err == nil {
		t.Fatalf("push %v succeeded:\n%s", args, tail(out))
	}
	if !strings.Contains(out, want) {
		t.Errorf("push %v: output lacks %q:\n%s", args, want, tail(out))
	}
	if after := gitserver.Git(t, bare, "for-each-ref"); after != before {
		t.Errorf("refs changed on the host:\n%s\n->\n%s", before, after)
	}
	rec := lastPush(t, g.e)
	if rec.Allowed || rec.Reason != "push_not_granted" || !strings.Contains(rec.Detail, "refused=refs/") {
		t.Errorf("refusal audit: %+v", rec)
	}
}

func TestGitRelayAttackPushMain(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	g.pushRefused(t, "! [remote rejected] HEAD -> main (ohd: pushing refs/heads/main is not granted; ohctl grant conv-g git "+g.srv.Host+" --push 'refs/heads/main')", "origin", "HEAD:main")
}

func TestGitRelayAttackDelete(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	g.setPush("HOST", "refs/heads/*")
	g.pushRefused(t, "(ohd: deleting refs/heads/other is never granted)", "origin", ":other")
}

func TestGitRelayAttackTag(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	g.pushRefused(t, "(ohd: pushing refs/tags/v2 is not granted", "origin", "HEAD:refs/tags/v2")
	g.setPush("HOST", "refs/tags/*")
	g.pushRefused(t, "(ohd: moving the existing tag refs/tags/v1 is never granted)", "--force", "origin", "HEAD:refs/tags/v1")
}

func TestGitRelayAttackForcePushOtherBranch(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	g.pushRefused(t, "(ohd: pushing refs/heads/other is not granted", "--force", "origin", "HEAD~2:other")
}

// TestGitRelayAtomicRefusedWhole: an atomic push of an allowed and a
// refused ref changes nothing; so does a plain one (ohd refuses a push
// whole).
func TestGitRelayAtomicRefusedWhole(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	g.pushRefused(t, "(ohd: atomic push refused: another ref in it is not granted)", "--atomic", "origin", "HEAD:refs/heads/openhands/a", "HEAD:main")
	g.pushRefused(t, "(ohd: push refused whole: another ref in it is not granted)", "origin", "HEAD:refs/heads/openhands/a", "HEAD:main")
}

// TestGitRelayPushPattern: --push widens the grant.
func TestGitRelayPushPattern(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	g.setPush("HOST", "refs/heads/feature/*")
	dir := t.TempDir()
	g.mustGit(t, dir, "clone", "-q", g.remote("acme/widgets.git"), "w")
	g.mustGit(t, filepath.Join(dir, "w"), "push", "origin", "HEAD:refs/heads/feature/x/y")
}

// rawPush posts a receive-pack body to the relay and returns the status
// and answer.
func (g *gitRelay) rawPush(t *testing.T, body io.Reader) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.relay+"/git/"+g.srv.Host+"/acme/widgets.git/git-receive-pack", body)
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	g.e.watch(string(b))
	return resp.StatusCode, b
}

// dribble writes b one byte at a time, so the broker reads the command
// list across many reads.
func dribble(b []byte) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for i := range b {
			if _, err := pw.Write(b[i : i+1]); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

// TestGitRelayAttackSplitCommandList: a command list arriving a byte at
// a time is read whole before anything is forwarded: the update of main
// hidden after an allowed one is refused.
func TestGitRelayAttackSplitCommandList(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	bare := filepath.Join(g.srv.Root, "acme/widgets.git")
	main := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", "main"))
	first := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", "main~1"))
	var b []byte
	b = gitproto.AppendString(b, strings.Repeat("0", 40)+" "+first+" refs/heads/openhands/ok\x00report-status")
	b = gitproto.AppendString(b, main+" "+first+" refs/heads/main")
	b = gitproto.AppendFlush(b)
	status, ans := g.rawPush(t, dribble(b))
	if status != 200 || !bytes.Contains(ans, []byte("ng refs/heads/main ohd: pushing refs/heads/main is not granted")) {
		t.Fatalf("split command list: %d %q", status, ans)
	}
	if got := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", "main")); got != main {
		t.Fatal("main moved")
	}
	lastPush(t, g.e)
}

// TestGitRelayAttackOversizedCommandList: a command list over 1 MiB is
// refused (413) before anything reaches the host.
func TestGitRelayAttackOversizedCommandList(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	n := len(g.srv.Authorizations())
	var b []byte
	for len(b) <= broker.MaxCommandList {
		b = gitproto.AppendString(b, strings.Repeat("0", 40)+" "+strings.Repeat("1", 40)+" refs/heads/openhands/"+strings.Repeat("x", 200))
	}
	status, ans := g.rawPush(t, bytes.NewReader(b))
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized: %d %s", status, ans)
	}
	if len(g.srv.Authorizations()) != n {
		t.Error("the host was asked")
	}
	if rec := g.e.audit(1); rec.Allowed || rec.Reason != "push_too_large" {
		t.Errorf("audit %+v", rec)
	}
}

// TestGitRelayAttackPaths: requests outside the grant's path prefix, with
// dot segments (plain or encoded), encoded slashes, or to anything but
// the smart-HTTP endpoints are refused before the host is asked.
func TestGitRelayAttackPaths(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{}, "HOST/acme")
	g.seed(t, "acme/widgets.git")
	g.srv.Repo(t, "other/secret.git")
	cases := []struct {
		path   string
		status int
	}{
		{"/other/secret.git/info/refs?service=git-upload-pack", 403},
		{"/acme-corp/x.git/info/refs?service=git-upload-pack", 403},
		{"/acme/../other/secret.git/info/refs?service=git-upload-pack", 400},
		{"/acme/%2e%2e/other/secret.git/info/refs?service=git-upload-pack", 400},
		{"/acme/%2E%2E/other/secret.git/info/refs?service=git-upload-pack", 400},
		{"/acme%2f..%2fother/secret.git/info/refs?service=git-upload-pack", 400},
		{"/acme/./widgets.git/info/refs?service=git-upload-pack", 400},
		{"/acme//widgets.git/info/refs?service=git-upload-pack", 400},
		{"/acme/widgets.git/HEAD", 400},
		{"/acme/widgets.git/objects/info/packs", 400},
		{"/acme/widgets.git/info/refs", 400},
		{"/acme/widgets.git/info/refs?service=git-upload-archive", 400},
		{"/acme/widgets.git/config", 400},
	}
	for _, c := range cases {
		n := len(g.srv.Authorizations())
		before := g.e.auditCount()
		// A raw request line: no client normalizes the path.
		status := rawGet(t, g.relay, "/git/"+g.srv.Host+c.path)
		if status != c.status {
			t.Errorf("%s: status %d, want %d", c.path, status, c.status)
		}
		if len(g.srv.Authorizations()) != n {
			t.Errorf("%s: the host was asked", c.path)
		}
		if g.e.auditCount() != before+1 {
			t.Errorf("%s: not audited", c.path)
		}
	}
	// The granted prefix itself works.
	if status := rawGet(t, g.relay, "/git/"+g.srv.Host+"/acme/widgets.git/info/refs?service=git-upload-pack"); status != 200 {
		t.Errorf("granted repository: %d", status)
	}
}

func rawGet(t *testing.T, base, path string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base, nil)
	req.URL.Opaque = path // sent as is
	if i := strings.IndexByte(path, '?'); i >= 0 {
		req.URL.Opaque, req.URL.RawQuery = path[:i], path[i+1:]
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestGitRelayAttackRedirect: a host answering with a redirect to another
// host: the relay does not follow it (502), and the other host never gets
// the credential.
func TestGitRelayAttackRedirect(t *testing.T) {
	other := gitserver.Start(t, gitserver.Options{Username: "x", Token: "other"})
	g := newGitRelay(t, gitserver.Options{RedirectTo: other.URL})
	out, err := g.git(t, t.TempDir(), "clone", g.remote("acme/widgets.git"), "c")
	if err == nil || !strings.Contains(out, "502") {
		t.Fatalf("clone through a redirect: %v\n%s", err, tail(out))
	}
	for _, a := range other.Authorizations() {
		if a != "" {
			t.Errorf("the other host got an Authorization header")
		}
	}
	if rec := g.e.audit(1); rec.Allowed || rec.Reason != "redirect" {
		t.Errorf("audit %+v", rec)
	}
}

// TestGitRelayStripsClientAuthorization: an Authorization header of the
// client's never reaches the host; the host sees the operator's.
func TestGitRelayStripsClientAuthorization(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	req, _ := http.NewRequest(http.MethodGet, g.relay+"/git/"+g.srv.Host+"/acme/widgets.git/info/refs?service=git-upload-pack", nil)
	req.Header.Set("Authorization", "Basic bWFsbG9yeTpwdw==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	g.checkAuthorizations(t)
	for _, a := range g.srv.Authorizations() {
		if strings.Contains(a, "bWFsbG9yeTpwdw") {
			t.Error("the client's Authorization reached the host")
		}
	}
}

// TestGitCredentialRelayedHostNoPassword: git-credential get for a
// relayed grant answers no password; for a grant made with
// --git-relay=false it answers the password.
func TestGitCredentialRelayedHostNoPassword(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	get := func() string {
		var out bytes.Buffer
		env := map[string]string{broker.EnvSocket: g.ep.Socket, broker.EnvTokenFile: g.ep.TokenFile}
		err := broker.GitCredentialHelper(t.Context(), "get", strings.NewReader("protocol=http\nhost="+g.srv.Host+"\n\n"), &out, io.Discard, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if got := get(); strings.Contains(got, "password") {
		t.Errorf("relayed host: git-credential get answered %q", got)
	}
	g.conv.Grants.GitOptions = map[string]broker.GitOptions{g.srv.Host: {Helper: true}}
	g.e.be.SetConversation(g.conv)
	if got := get(); !strings.Contains(got, "password="+gitToken) {
		t.Errorf("helper grant: git-credential get answered without the password")
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGitRelayGzipBodies: a gzip push body is decoded before the policy
// reads it (a push to main hidden in gzip is refused), and a gzip
// upload-pack request passes to the host as git sent it.
func TestGitRelayGzipBodies(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	bare := filepath.Join(g.srv.Root, "acme/widgets.git")
	main := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", "main"))
	first := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", "main~1"))

	var push []byte
	push = gitproto.AppendString(push, main+" "+first+" refs/heads/main\x00report-status")
	push = gitproto.AppendFlush(push)
	req, _ := http.NewRequest(http.MethodPost, g.relay+"/git/"+g.srv.Host+"/acme/widgets.git/git-receive-pack", bytes.NewReader(gzipped(t, push)))
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ans, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(ans, []byte("ng refs/heads/main ohd: pushing refs/heads/main is not granted")) {
		t.Fatalf("gzip push to main: %d %q", resp.StatusCode, ans)
	}

	var fetch []byte
	fetch = gitproto.AppendString(fetch, "want "+main+" ofs-delta\n")
	fetch = gitproto.AppendFlush(fetch)
	fetch = gitproto.AppendString(fetch, "done\n")
	req, _ = http.NewRequest(http.MethodPost, g.relay+"/git/"+g.srv.Host+"/acme/widgets.git/git-upload-pack", bytes.NewReader(gzipped(t, fetch)))
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ans, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(ans, []byte("PACK")) {
		t.Fatalf("gzip upload-pack: %d %q", resp.StatusCode, truncate(ans))
	}
	g.checkAuthorizations(t)
}

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// TestGitRelayMasksEchoedToken: a host that echoes the credential (as
// sent, or the Basic form of it) in its answer's headers and body gets it
// masked before git sees it.
func TestGitRelayMasksEchoedToken(t *testing.T) {
	e := newEnv(t)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		fmt.Fprintf(w, "auth=%s token=%s", r.Header.Get("Authorization"), gitToken)
	}))
	t.Cleanup(echo.Close)
	host := strings.TrimPrefix(echo.URL, "http://")
	e.be.SetGitCredential(host, broker.GitCredential{Username: "x-access-token", Password: []byte(gitToken), Scheme: "http"})
	ep := e.open(broker.Conversation{ID: "conv-e", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{Git: []string{host}}})
	resp, body := e.request(ep.Socket, http.MethodGet, "/v1/git/"+host+"/r.git/info/refs?service=git-upload-pack", authed(e.token("conv-e", 1)), nil)
	all := fmt.Sprint(resp.Header) + string(body)
	e.watch(all)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "token=****") {
		t.Fatalf("echo: %d %q", resp.StatusCode, body)
	}
	if strings.Contains(all, gitToken) || strings.Contains(all, base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gitToken))) {
		t.Errorf("the token came back: %s", all)
	}
}

// TestGitRelayCutAnswerIsCut: the host's connection is lost in the middle
// of its answer: git's read through the relay ends in an error, never in
// a clean end that would pass a part of a pack or a ref list for the
// whole; the audit says upstream_interrupted.
func TestGitRelayCutAnswerIsCut(t *testing.T) {
	e := newEnv(t)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		fmt.Fprint(w, "001e# service=git-upload-pack\n")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(host.Close)
	addr := strings.TrimPrefix(host.URL, "http://")
	e.be.SetGitCredential(addr, broker.GitCredential{Username: "x-access-token", Password: []byte(gitToken), Scheme: "http"})
	ep := e.open(broker.Conversation{ID: "conv-c", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{Git: []string{addr}}})
	n := e.auditCount()
	req, _ := http.NewRequest(http.MethodGet, "http://x/v1/git/"+addr+"/r.git/info/refs?service=git-upload-pack", nil)
	resp, err := e.client(ep).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("a cut answer read to a clean end (%q): git takes the part for the whole", got)
	}
	if rec := e.audit(n + 1); rec.Reason != "upstream_interrupted" {
		t.Errorf("audit of a cut answer = %+v, want reason upstream_interrupted", rec)
	}
}

// clone clones acme/widgets.git through g's relay and returns the work
// tree.
func (g *gitRelay) clone(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	g.mustGit(t, dir, "clone", "-q", g.remote("acme/widgets.git"), "w")
	return filepath.Join(dir, "w")
}

// commit commits a change to work.txt in work.
func commit(t *testing.T, work, msg string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(work, "work.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, msg)
	f.Close()
	gitserver.Git(t, work, "add", "work.txt")
	gitserver.Git(t, work, "commit", "-q", "-m", msg)
}

// TestGitRelayPushOwnBranches: conversation G creates and updates its
// own openhands/conv-g; H creates a new branch, updates it and force
// pushes over it (it created it); H's force push over G's branch and G's
// over H's new branch are refused in git's words, audited, and move
// nothing; only the creation the host reported is recorded, as H's.
func TestGitRelayPushOwnBranches(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	h := g.peer(t, "conv-h")
	bare := filepath.Join(g.srv.Root, "acme/widgets.git")
	const gRef, hRef = "refs/heads/openhands/conv-g", "refs/heads/openhands/h-made"

	gw := g.clone(t)
	commit(t, gw, "g1")
	g.mustGit(t, gw, "push", "origin", "HEAD:"+gRef)
	commit(t, gw, "g2")
	g.mustGit(t, gw, "push", "origin", "HEAD:"+gRef)
	gTip := gitserver.Git(t, bare, "rev-parse", gRef)

	hw := h.clone(t)
	commit(t, hw, "h1")
	h.mustGit(t, hw, "push", "origin", "HEAD:"+hRef)
	if rec := lastPush(t, g.e); !rec.Allowed || !strings.HasSuffix(rec.Detail, " created="+hRef) {
		t.Errorf("H's creation audit: %+v", rec)
	}
	commit(t, hw, "h2")
	h.mustGit(t, hw, "push", "origin", "HEAD:"+hRef)
	h.mustGit(t, hw, "push", "--force", "origin", "HEAD~1:"+hRef)
	h.mustGit(t, hw, "push", "origin", "HEAD:"+hRef)
	hTip := gitserver.Git(t, bare, "rev-parse", hRef)

	refused := func(r *gitRelay, work, ref, want string) {
		t.Helper()
		out, err := r.git(t, work, "push", "--force", "origin", "HEAD:"+ref)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("%s's force push over %s: %v\n%s\nwant %q", r.conv.ID, ref, err, tail(out), want)
		}
		if rec := lastPush(t, g.e); rec.Allowed || rec.Conversation != r.conv.ID || rec.Reason != "push_not_granted" || !strings.Contains(rec.Detail, "refused="+ref) {
			t.Errorf("refusal audit: %+v", rec)
		}
	}
	refused(h, hw, gRef, "! [remote rejected] HEAD -> openhands/conv-g (ohd: "+gRef+" is not this conversation's branch: it may update refs/heads/openhands/conv-h, the refs below it and the branches it created; ohctl grant conv-h git "+g.srv.Host+" --push '"+gRef+"')")
	g.mustGit(t, gw, "fetch", "-q", "origin")
	refused(g, gw, hRef, "! [remote rejected] HEAD -> openhands/h-made (ohd: "+hRef+" is not this conversation's branch")
	if got := gitserver.Git(t, bare, "rev-parse", gRef); got != gTip {
		t.Errorf("G's branch moved")
	}
	if got := gitserver.Git(t, bare, "rev-parse", hRef); got != hTip {
		t.Errorf("H's branch moved")
	}
	want := map[string]string{g.srv.Host + "/acme/widgets.git " + hRef: "conv-h"}
	if got := g.e.be.GitBranches(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("recorded creations %v, want %v", got, want)
	}
	g.checkAuthorizations(t)
	g.e.checkHygiene()
}

// TestGitRelayHostRefusalNotRecorded: a creation the host refuses (its
// update hook declines one ref of a push) is not recorded, the other is;
// so a refused creation grants nothing.
func TestGitRelayHostRefusalNotRecorded(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	bare := filepath.Join(g.srv.Root, "acme/widgets.git")
	hook := "#!/bin/sh\n[ \"$1\" = refs/heads/openhands/declined ] && { echo declined by the host >&2; exit 1; }\nexit 0\n"
	if err := os.WriteFile(filepath.Join(bare, "hooks", "update"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	w := g.clone(t)
	commit(t, w, "two")
	out, err := g.git(t, w, "push", "origin", "HEAD:refs/heads/openhands/kept", "HEAD:refs/heads/openhands/declined")
	if err == nil || !strings.Contains(out, "! [remote rejected] HEAD -> openhands/declined (hook declined)") {
		t.Fatalf("push: %v\n%s", err, tail(out))
	}
	want := map[string]string{g.srv.Host + "/acme/widgets.git refs/heads/openhands/kept": "conv-g"}
	if got := g.e.be.GitBranches(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("recorded creations %v, want %v", got, want)
	}
	if rec := lastPush(t, g.e); !strings.HasSuffix(rec.Detail, " created=refs/heads/openhands/kept") {
		t.Errorf("audit detail %q", rec.Detail)
	}
}

// emptyPack is a pack of no objects, what git sends when the host has
// every object a push needs.
func emptyPack() []byte {
	p := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	sum := sha1.Sum(p)
	return append(p, sum[:]...)
}

// TestGitRelayAttackCreateOverExisting: conversation H claims to create
// G's existing branch (old id zero, a raw push): the policy lets a
// creation through, the host refuses it because the branch exists, and
// nothing is recorded, so H's next update of it is refused.
func TestGitRelayAttackCreateOverExisting(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{})
	g.seed(t, "acme/widgets.git")
	h := g.peer(t, "conv-h")
	bare := filepath.Join(g.srv.Root, "acme/widgets.git")
	const ref = "refs/heads/openhands/g-made"
	gw := g.clone(t)
	commit(t, gw, "g")
	g.mustGit(t, gw, "push", "origin", "HEAD:"+ref)
	tip := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", ref))
	first := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", "main~1"))

	var b []byte
	b = gitproto.AppendString(b, strings.Repeat("0", 40)+" "+first+" "+ref+"\x00report-status")
	b = gitproto.AppendFlush(b)
	status, ans := h.rawPush(t, bytes.NewReader(append(b, emptyPack()...)))
	if status != 200 || !bytes.Contains(ans, []byte("ng "+ref)) {
		t.Fatalf("create over an existing branch: %d %q", status, ans)
	}
	if got := strings.TrimSpace(gitserver.Git(t, bare, "rev-parse", ref)); got != tip {
		t.Fatal("the branch moved")
	}
	if got := g.e.be.GitBranches(); got[g.srv.Host+"/acme/widgets.git "+ref] != "conv-g" || len(got) != 1 {
		t.Errorf("recorded creations %v", got)
	}
	b = gitproto.AppendString(nil, tip+" "+first+" "+ref+"\x00report-status")
	b = gitproto.AppendFlush(b)
	status, ans = h.rawPush(t, bytes.NewReader(append(b, emptyPack()...)))
	if status != 200 || !bytes.Contains(ans, []byte("ng "+ref+" ohd: "+ref+" is not this conversation's branch")) {
		t.Fatalf("H's update after its failed claim: %d %q", status, ans)
	}
}

// TestGitRelayNotGrantedReason: git shows why the relay refused a
// repository outside the grant (a text/plain body git prints as
// "remote: ..."), naming the grant that would allow it.
func TestGitRelayNotGrantedReason(t *testing.T) {
	g := newGitRelay(t, gitserver.Options{}, "HOST/acme")
	g.srv.Repo(t, "other/secret.git")
	out, err := g.git(t, t.TempDir(), "ls-remote", g.remote("other/secret.git"))
	want := "remote: ohd: " + g.srv.Host + "/other/secret.git is not granted to this conversation; on the host run: ohctl grant conv-g git " + g.srv.Host + "/other/secret"
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "403") {
		t.Errorf("ls-remote outside the grant: %v\n%s\nwant %q", err, tail(out), want)
	}
	if rec := g.e.audit(1); rec.Allowed || rec.Reason != "not_granted" || rec.Status != http.StatusForbidden {
		t.Errorf("audit %+v", rec)
	}
}
