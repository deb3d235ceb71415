package integration

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/gitserver"
	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// relayedRepo starts a git http-backend on the host's loopback demanding
// token (Basic, or Bearer), seeds acme/widgets.git with a main branch and
// configures it for ohd as http://HOST with the token in secret gh.
func relayedRepo(t *testing.T, d *daemon, token string, bearer bool) *gitserver.Server {
	t.Helper()
	srv := gitserver.Start(t, gitserver.Options{Username: "x-access-token", Token: token, Bearer: bearer})
	bare := srv.Repo(t, "acme/widgets.git")
	work := t.TempDir()
	gitserver.Git(t, work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "README"), bytes.Repeat([]byte("hello\n"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	gitserver.Git(t, work, "add", ".")
	gitserver.Git(t, work, "commit", "-q", "-m", "first")
	gitserver.Git(t, work, "push", "-q", bare, "main")
	if _, err := d.ohctlIn(token, "secret", "set", "gh"); err != nil {
		t.Fatal(err)
	}
	args := []string{"git-host", "set", "http://" + srv.Host, "--secret", "gh"}
	if bearer {
		args = append(args, "--auth", "bearer")
	}
	d.ohctl(args...)
	return srv
}

// installFindstr puts integration/attacktool (as findstr) into the
// conversation's git view, outside its worktree, and returns its path
// inside the container, where the view is the repository's .git.
func installFindstr(t *testing.T, c store.Conversation, repo string) string {
	t.Helper()
	installAttackTool(t, filepath.Join(filepath.Dir(c.Worktree), ".ohd", "git", "relaytools"), c.UID, c.GID, "findstr")
	return filepath.Join(repo, ".git", "relaytools", "findstr")
}

// reversedB64 is how findstr is told the value to look for, so that the
// value itself is on no command line.
func reversedB64(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return base64.StdEncoding.EncodeToString(b)
}

// TestBackendGitRelayInsideAContainer: real git in a conversation's container
// clones (protocol v2 and v0, shallow, partial), fetches and pushes
// through the relay to a git http-backend on the host that demands the
// token; a push to main is refused with git's own line and audited; and
// the token is nowhere inside: not in any process's environment or
// command line, not in any file of the container's root file system,
// /tmp, /run/ohd, the worktree or HOME, not in git's curl and packet
// traces (which hold every answer of the relay), and git-credential get
// hands out no password for the host.
func TestBackendGitRelayInsideAContainer(t *testing.T) {
	eachBackend(t, gitRelayInsideAContainer)
}

func gitRelayInsideAContainer(t *testing.T, b backend) {
	d := b.daemon(t)
	token := "ghs_relay_" + fmt.Sprint(os.Getpid()) + "_never_inside"
	srv := relayedRepo(t, d, token, false)
	var c store.Conversation
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree", "--grant-git", srv.Host+"/acme")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
	findstr := installFindstr(t, c, repo)
	remote := "http://" + srv.Host + "/acme/widgets.git"

	script := strings.Join([]string{
		"set -e",
		"export GIT_TRACE_CURL=/tmp/gr-trace GIT_TRACE_PACKET=/tmp/gr-trace",
		"cd /tmp && git init -q gr && cd gr",
		"git clone -q " + remote + " v2",
		"git -c protocol.version=0 clone -q " + remote + " v0",
		"git clone -q --depth 1 " + remote + " shallow",
		"git clone -q --filter=blob:none " + remote + " partial",
		"git -C partial config remote.origin.promisor",
		"cd v2 && git fetch -q origin",
		"echo work > agent.txt && git add agent.txt && git -c user.name=a -c user.email=a@example.com commit -qm 'agent work'",
		"git push -q origin HEAD:refs/heads/openhands/agent",
		"echo everyday-ok",
	}, "\n")
	code, out := d.execIn(c.ID, "sh", "-c", script)
	if code != 0 || !strings.Contains(out, "everyday-ok") {
		t.Fatalf("git through the relay: %d\n%s\n--- ohd log ---\n%s", code, out, tail(d.logs.String(), 30))
	}
	if got := strings.TrimSpace(gitserver.Git(t, filepath.Join(srv.Root, "acme/widgets.git"), "log", "-1", "--format=%s", "refs/heads/openhands/agent")); got != "agent work" {
		t.Errorf("the push did not land: %q", got)
	}

	// The agent pushes to main: git prints the relay's rejection.
	code, out = d.execIn(c.ID, "sh", "-c", "cd /tmp/gr/v2 && GIT_TRACE_PACKET=/tmp/gr-trace git push origin HEAD:main 2>&1")
	want := "! [remote rejected] HEAD -> main (ohd: pushing refs/heads/main is not granted; ohctl grant " + c.ID + " git " + srv.Host + "/acme --push 'refs/heads/main')"
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("push to main: %d\n%s\nwant %q", code, out, want)
	}
	audit := d.ohctl("--json", "audit", c.ID, "--limit", "0")
	if !strings.Contains(audit, "push asked=refs/heads/main allowed= refused=refs/heads/main") ||
		!strings.Contains(audit, "push asked=refs/heads/openhands/agent allowed=refs/heads/openhands/agent refused=") {
		t.Errorf("the pushes are not audited with their refs:\n%s", tail(audit, 20))
	}

	// git-credential get answers no password for the relayed host.
	code, out = d.execIn(c.ID, "sh", "-c", "printf 'url="+remote+"\\n\\n' | "+"/run/ohd/bin/ohctl git-credential get; echo exit=$?")
	if strings.Contains(out, "password") || !strings.Contains(out, "exit=0") {
		t.Errorf("git-credential get for a relayed host: %d %q", code, out)
	}

	// The token is nowhere inside.
	_, out = d.execIn(c.ID, "sh", "-c", findstr+" "+reversedB64(token)+" / /tmp /run/ohd "+c.Worktree+" $HOME")
	t.Logf("search for the token inside: %s", strings.TrimSpace(out))
	if !strings.Contains(out, " 0 hits") || strings.Contains(out, "searched 0 files") {
		t.Errorf("searching the container for the token: %s", out)
	}
	// The search is able to find it: the trace names the relay.
	_, out = d.execIn(c.ID, "sh", "-c", findstr+" "+reversedB64("/git/"+srv.Host+"/acme/widgets.git")+" /tmp")
	if !strings.Contains(out, "hit /tmp/gr-trace") {
		t.Errorf("findstr does not find what the trace holds: %s", out)
	}
	for _, a := range srv.Authorizations() {
		if a == "" {
			t.Error("the git host got a request without the credential")
		}
	}
	if strings.Contains(d.logs.String(), token) || strings.Contains(audit, token) {
		t.Error("the token is in ohd's log or audit")
	}
}

// TestBackendGitRelayBearerInsideAContainer: a host configured with --auth
// bearer gets the token as a bearer token; git inside clones.
func TestBackendGitRelayBearerInsideAContainer(t *testing.T) {
	eachBackend(t, gitRelayBearerInsideAContainer)
}

func gitRelayBearerInsideAContainer(t *testing.T, b backend) {
	d := b.daemon(t)
	srv := relayedRepo(t, d, "bearer-"+fmt.Sprint(os.Getpid()), true)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree", "--grant-git", srv.Host)
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
	code, out := d.execIn(c.ID, "sh", "-c", "cd /tmp && git clone -q http://"+srv.Host+"/acme/widgets.git gb && echo cloned")
	if code != 0 || !strings.Contains(out, "cloned") {
		t.Fatalf("bearer clone: %d %s", code, out)
	}
	show := d.ohctl("show", c.ID)
	if !strings.Contains(show, srv.Host+" (relay; push its own branches under refs/heads/openhands/)") {
		t.Errorf("ohctl show does not say the grant's route:\n%s", show)
	}
}

// TestBackendGitRelayAttacksInsideAContainer: the agent, with git inside its
// container, tries what the relay must refuse; each attempt fails, the
// host's refs do not move, and the refusal is audited.
func TestBackendGitRelayAttacksInsideAContainer(t *testing.T) {
	eachBackend(t, gitRelayAttacksInsideAContainer)
}

func gitRelayAttacksInsideAContainer(t *testing.T, b backend) {
	d := b.daemon(t)
	srv := relayedRepo(t, d, "attack-"+fmt.Sprint(os.Getpid()), false)
	bare := filepath.Join(srv.Root, "acme/widgets.git")
	// other is a commit main does not contain: pushing main there is a
	// force push.
	otherTip := strings.TrimSpace(gitserver.Git(t, bare, "commit-tree", "main^{tree}", "-p", "main", "-m", "other"))
	gitserver.Git(t, bare, "update-ref", "refs/heads/other", otherTip)
	gitserver.Git(t, bare, "tag", "v1", "main")
	srv.Repo(t, "secret/vault.git")
	other := gitserver.Start(t, gitserver.Options{Username: "x", Token: "other"})
	redirecting := gitserver.Start(t, gitserver.Options{RedirectTo: other.URL, Username: "x", Token: "y"})
	if _, err := d.ohctlIn("redirect-token", "secret", "set", "gh2"); err != nil {
		t.Fatal(err)
	}
	d.ohctl("git-host", "set", "http://"+redirecting.Host, "--secret", "gh2")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree",
		"--grant-git", srv.Host+"/acme", "--grant-git", redirecting.Host)
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
	remote := "http://" + srv.Host + "/acme/widgets.git"
	relay := "http://127.0.0.1:8751/git/" + srv.Host
	code, out := d.execIn(c.ID, "sh", "-c", "cd /tmp && git clone -q "+remote+" w && cd w && echo x > x && git add x && git -c user.name=a -c user.email=a@example.com commit -qm evil && echo ready")
	if code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("clone: %d %s", code, out)
	}
	refs := gitserver.Git(t, bare, "for-each-ref")
	for _, tc := range []struct{ name, cmd, want string }{
		{"push main", "git push origin HEAD:main", "(ohd: pushing refs/heads/main is not granted"},
		{"delete", "git push origin :refs/heads/other", "(ohd: deleting refs/heads/other is never granted)"},
		{"tag", "git push origin HEAD:refs/tags/v2", "(ohd: pushing refs/tags/v2 is not granted"},
		{"move tag", "git push --force origin HEAD:refs/tags/v1", "(ohd: moving the existing tag refs/tags/v1 is never granted)"},
		{"force push other", "git push --force origin HEAD~1:refs/heads/other", "(ohd: pushing refs/heads/other is not granted"},
		{"atomic", "git push --atomic origin HEAD:refs/heads/openhands/a HEAD:main", "(ohd: atomic push refused: another ref in it is not granted)"},
		{"outside the prefix", "git ls-remote http://" + srv.Host + "/secret/vault.git", "remote: ohd: " + srv.Host + "/secret/vault.git is not granted to this conversation; on the host run: ohctl grant " + c.ID + " git " + srv.Host + "/secret/vault"},
		{"dot dot", "git ls-remote " + relay + "/acme/%2e%2e/secret/vault.git", "400"},
		{"encoded slash", "git ls-remote " + relay + "/acme%2f..%2fsecret/vault.git", "400"},
		{"redirect", "git ls-remote http://" + redirecting.Host + "/acme/widgets.git", "502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := d.execIn(c.ID, "sh", "-c", "cd /tmp/w && "+tc.cmd+" 2>&1")
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("%s: %d\n%s\nwant %q", tc.cmd, code, out, tc.want)
			}
		})
	}
	if after := gitserver.Git(t, bare, "for-each-ref"); after != refs {
		t.Errorf("refs moved on the host:\n%s\n->\n%s", refs, after)
	}
	for _, a := range other.Authorizations() {
		if a != "" {
			t.Error("the host a redirect pointed to got an Authorization header")
		}
	}
	audit := d.ohctl("--json", "audit", c.ID, "--limit", "0")
	for _, want := range []string{`"reason": "push_not_granted"`, `"reason": "not_granted"`, `"reason": "bad_path"`, `"reason": "redirect"`, "refused=refs/heads/other", "refused=refs/tags/v1"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit lacks %s", want)
		}
	}
}

// TestBackendGitRelayGrantWhileRunning: a git grant given to a running
// conversation reaches git inside at its next command (the url rewrite
// is a file ohd rewrites, included by the container's git
// configuration), and a revoke takes it back, without a restart.
func TestBackendGitRelayGrantWhileRunning(t *testing.T) {
	eachBackend(t, gitRelayGrantWhileRunning)
}

func gitRelayGrantWhileRunning(t *testing.T, b backend) {
	d := b.daemon(t)
	token := "ghs_live_" + fmt.Sprint(os.Getpid())
	srv := relayedRepo(t, d, token, false)
	var c store.Conversation
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
	lsRemote := "git ls-remote http://" + srv.Host + "/acme/widgets.git 2>&1"
	if code, out := d.execIn(c.ID, "sh", "-c", lsRemote); code == 0 || strings.Contains(out, "refs/heads/main") {
		t.Fatalf("ls-remote before any git grant = %d %q, want a failure", code, out)
	}
	d.ohctl("grant", c.ID, "git", srv.Host+"/acme")
	code, out := d.execIn(c.ID, "sh", "-c", lsRemote)
	if code != 0 || !strings.Contains(out, "refs/heads/main") {
		t.Fatalf("ls-remote after the grant, same container = %d %q, want main's ref", code, out)
	}
	var recs []store.AuditRecord
	d.ohctlJSON(&recs, "audit", "--limit", "0", c.ID)
	var relayed bool
	for _, r := range recs {
		relayed = relayed || r.Allowed && r.Kind == store.KindGit && strings.HasPrefix(r.Route, "ANY /v1/git/")
	}
	if !relayed {
		t.Errorf("no allowed request of the git relay in the audit: %+v", recs)
	}
	d.ohctl("revoke", c.ID, "git", srv.Host+"/acme")
	if code, out := d.execIn(c.ID, "sh", "-c", lsRemote); code == 0 || strings.Contains(out, "refs/heads/main") {
		t.Errorf("ls-remote after the revoke = %d %q, want a failure", code, out)
	}
}

// TestBackendGitRelayPushOwnBranchesOnly: two conversations push through their
// relays to one remote. Each may create and update its own
// openhands/<id> branch and a new branch under openhands/ it creates
// itself; B's creating A's branch before A does, B's force push over
// A's branch, and A's over the branch B created, are refused with git's "remote rejected" line naming the
// reason, the remote's refs do not move, and the refusals are in ohctl
// audit. The control: the same force push of B's with a --push pattern
// covering A's branch (what every conversation could do before) lands.
func TestBackendGitRelayPushOwnBranchesOnly(t *testing.T) {
	eachBackend(t, gitRelayPushOwnBranchesOnly)
}

func gitRelayPushOwnBranchesOnly(t *testing.T, be backend) {
	d := be.daemon(t)
	srv := relayedRepo(t, d, "owner-"+fmt.Sprint(os.Getpid()), false)
	bare := filepath.Join(srv.Root, "acme/widgets.git")
	remote := "http://" + srv.Host + "/acme/widgets.git"
	var a, b store.Conversation
	d.ohctlJSON(&a, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree", "--grant-git", srv.Host+"/acme")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", a.ID) })
	d.ohctlJSON(&b, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree", "--grant-git", srv.Host+"/acme")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", b.ID) })
	commit := func(msg string) string {
		return "echo '" + msg + "' >> work.txt && git add work.txt && git -c user.name=a -c user.email=a@example.com commit -qm '" + msg + "'"
	}
	// run runs script in conversation c's clone (made on first use) and
	// returns git's output and exit code.
	run := func(c store.Conversation, script string) (int, string) {
		t.Helper()
		return d.execIn(c.ID, "sh", "-c", "cd /tmp && { [ -d w ] || git clone -q "+remote+" w; } && cd w && "+script+" 2>&1")
	}
	tip := func(ref string) string {
		t.Helper()
		out, err := gitserver.Run(bare, "rev-parse", "-q", "--verify", ref)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	aRef, bRef := "refs/heads/openhands/"+a.ID, "refs/heads/openhands/"+b.ID+"-feature"

	// B names a branch A has not pushed yet: refused, or B would own
	// A's branch before A made it.
	code, out := run(b, commit("b0")+" && git push origin HEAD:"+aRef)
	if code == 0 || !strings.Contains(out, "(ohd: "+aRef+" is named for another conversation") {
		t.Errorf("B creates A's branch first: %d\n%s", code, out)
	}
	if tip(aRef) != "" {
		t.Fatal("B created A's branch")
	}
	// A creates and updates its own branch.
	if code, out := run(a, commit("a1")+" && git push -q origin HEAD:"+aRef+" && "+commit("a2")+" && git push -q origin HEAD:"+aRef+" && echo a-ok"); code != 0 || !strings.Contains(out, "a-ok") {
		t.Fatalf("A pushes its own branch: %d\n%s\n--- ohd log ---\n%s", code, out, tail(d.logs.String(), 30))
	}
	aTip := tip(aRef)
	// B creates a new branch of its own choosing, updates it, and force
	// pushes over it: it created it, so it is B's.
	if code, out := run(b, commit("b1")+" && git push -q origin HEAD:"+bRef+" && "+commit("b2")+" && git push -q origin HEAD:"+bRef+
		" && git push -q --force origin HEAD~1:"+bRef+" && git push -q origin HEAD:"+bRef+" && echo b-ok"); code != 0 || !strings.Contains(out, "b-ok") {
		t.Fatalf("B creates and updates a new branch: %d\n%s\n--- ohd log ---\n%s", code, out, tail(d.logs.String(), 30))
	}
	bTip := tip(bRef)

	// B force-pushes over A's branch: refused in git's words.
	code, out = run(b, "git push --force origin HEAD:"+aRef)
	want := "! [remote rejected] HEAD -> openhands/" + a.ID + " (ohd: " + aRef + " is not this conversation's branch"
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("B's force push over A's branch: %d\n%s\nwant %q", code, out, want)
	}
	// A force-pushes over the branch B created: refused.
	code, out = run(a, "git fetch -q origin && git push --force origin HEAD:"+bRef)
	if code == 0 || !strings.Contains(out, "(ohd: "+bRef+" is not this conversation's branch") {
		t.Errorf("A's force push over B's branch: %d\n%s", code, out)
	}
	if got := tip(aRef); got != aTip {
		t.Errorf("A's branch moved: %s -> %s", aTip, got)
	}
	if got := tip(bRef); got != bTip {
		t.Errorf("B's branch moved: %s -> %s", bTip, got)
	}
	var recs []store.AuditRecord
	d.ohctlJSON(&recs, "audit", "--limit", "0", b.ID)
	var audited bool
	for _, r := range recs {
		audited = audited || !r.Allowed && r.Reason == "push_not_granted" && r.Conversation == b.ID &&
			strings.Contains(r.Detail, "refused="+aRef) && strings.Contains(r.Name, srv.Host)
	}
	if !audited {
		t.Errorf("B's refused push over A's branch is not in ohctl audit:\n%s", tail(d.ohctl("audit", "--limit", "0", b.ID), 20))
	}

	// The control: with a --push pattern that names A's branch, B's
	// force push lands (the operator widened the policy).
	d.ohctl("grant", b.ID, "git", srv.Host+"/acme", "--push", "refs/heads/openhands/*")
	if code, out := run(b, "git push -q --force origin HEAD:"+aRef+" && echo forced"); code != 0 || !strings.Contains(out, "forced") {
		t.Fatalf("B's force push with --push 'refs/heads/openhands/*': %d\n%s", code, out)
	}
	if got := tip(aRef); got == aTip {
		t.Error("the control did not move A's branch")
	}
}
