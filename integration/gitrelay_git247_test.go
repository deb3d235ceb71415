package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/gitserver"
	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// git247DebsEnv names the directory of Debian trixie's git 2.47 packages
// and their runtime libraries (.deb files), which .ci/run downloads.
const git247DebsEnv = "OHD_GIT247_DEBS"

// git247Debs returns the .deb files in $OHD_GIT247_DEBS, or stops t
// (a failure when CI=true) when there are none or dpkg-deb is missing.
func git247Debs(t *testing.T) []string {
	t.Helper()
	debsDir := os.Getenv(git247DebsEnv)
	if debsDir == "" {
		testenv.Missing(t, "%s is not set: it names the directory of Debian trixie's git .deb files (OHD_GIT247_DEBS=$(.ci/git247-debs) downloads them)", git247DebsEnv)
	}
	debs, _ := filepath.Glob(filepath.Join(debsDir, "*.deb"))
	if len(debs) == 0 {
		testenv.Missing(t, "%s=%s holds no .deb files: run .ci/git247-debs %s", git247DebsEnv, debsDir, debsDir)
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		testenv.Missing(t, "dpkg-deb is not installed: it unpacks the git 2.47 packages")
	}
	return debs
}

// installGit247 unpacks debs (from git247Debs) and puts trixie's git into
// the conversation's git view, outside its worktree:
// lib/ holds trixie's dynamic loader and every shared library of the
// packages, bin/ git and git-remote-http, and x/ (git's exec path) small
// scripts named git, git-remote-http and git-remote-https that run them
// through that loader, so the container's own glibc and git play no part.
// It returns the path of x/ inside the container, where the view is the
// repository's .git.
func installGit247(t *testing.T, debs []string, c store.Conversation, repo string) string {
	t.Helper()
	root := t.TempDir()
	for _, deb := range debs {
		if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
	}
	dir := filepath.Join(filepath.Dir(c.Worktree), ".ohd", "git", "git247")
	for _, sub := range []string{"lib", "bin", "x"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The agent runs as a uid of its own (issue 26) and writes its trace
	// here.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	copied := 0
	for _, libDir := range []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"} {
		entries, err := os.ReadDir(filepath.Join(root, libDir))
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.Contains(e.Name(), ".so") {
				continue
			}
			copyPreservingLink(t, filepath.Join(root, libDir, e.Name()), filepath.Join(dir, "lib", e.Name()))
			copied++
		}
	}
	copyPreservingLink(t, filepath.Join(root, "usr/bin/git"), filepath.Join(dir, "bin", "git"))
	copyPreservingLink(t, filepath.Join(root, "usr/lib/git-core/git-remote-http"), filepath.Join(dir, "bin", "git-remote-http"))
	if _, err := os.Stat(filepath.Join(dir, "lib", "ld-linux-x86-64.so.2")); err != nil || copied == 0 {
		t.Fatalf("the packages in %s lack trixie's loader or libraries (%d copied): %v; .ci/git247-debs fetches libc6 and the rest", os.Getenv(git247DebsEnv), copied, err)
	}
	inside := filepath.Join(repo, ".git", "git247")
	for name, bin := range map[string]string{"git": "git", "git-remote-http": "git-remote-http", "git-remote-https": "git-remote-http"} {
		script := "#!/bin/sh\nexec " + inside + "/lib/ld-linux-x86-64.so.2 --library-path " + inside + "/lib " + inside + "/bin/" + bin + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, "x", name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.ChownR(t, dir, c.UID, c.GID)
	return inside + "/x"
}

// copyPreservingLink copies the regular file or symbolic link src to dst.
func copyPreservingLink(t *testing.T, src, dst string) {
	t.Helper()
	st, err := os.Lstat(src)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(target), dst); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()|0o444); err != nil {
		t.Fatal(err)
	}
}

// TestBackendGitRelayGit247InsideAContainer: Debian trixie's git 2.47 (the
// container's own git is the host's, 2.39, which
// TestGitRelayInsideAContainer uses) runs in a conversation's container
// and clones (protocol v2 and v0, shallow, partial, and from a host that
// asks a bearer token), fetches and pushes through the relay; a push to main gets git's own rejection line. Every
// request the relay got came from git 2.47: the curl trace of the run
// names its User-Agent and never another.
func TestBackendGitRelayGit247InsideAContainer(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		debs := git247Debs(t)
		d := b.daemon(t)
		token := "git247-" + store.NewID()
		srv := relayedRepo(t, d, token, false)
		// A second host asks the same token (secret gh) as a bearer token.
		bearer := relayedRepo(t, d, token, true)
		var c store.Conversation
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree", "--grant-git", srv.Host+"/acme", "--grant-git", bearer.Host)
		t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
		execPath := installGit247(t, debs, c, repo)
		// The trace goes to the git view, where the host reads it (the image
		// has no grep).
		work := filepath.Join(repo, ".git", "git247")
		hostWork := filepath.Join(filepath.Dir(c.Worktree), ".ohd", "git", "git247")
		env := "export GIT_EXEC_PATH=" + execPath + " PATH=" + execPath + ":$PATH GIT_TRACE_CURL=" + work + "/trace GIT_TRACE_PACKET=" + work + "/trace GIT_TRACE_CURL_NO_DATA=1"
		remote := "http://" + srv.Host + "/acme/widgets.git"

		script := strings.Join([]string{
			"set -e",
			env,
			"git version",
			// One command a line: set -e stops at any that fails (the image
			// has no mkdir; git init makes the directory).
			"cd /tmp",
			"git init -q g247",
			"cd g247",
			"git clone -q " + remote + " v2",
			"git -c protocol.version=0 clone -q " + remote + " v0",
			"git clone -q --filter=blob:none " + remote + " partial",
			"git -C partial config remote.origin.promisor",
			"git clone -q http://" + bearer.Host + "/acme/widgets.git bearer",
			"cd v2",
			"git fetch -q origin",
			"echo work > agent.txt",
			"git add agent.txt",
			"git -c user.name=a -c user.email=a@example.com commit -qm 'agent work 2.47'",
			"git push -q origin HEAD:refs/heads/openhands/git247",
			"cd ..",
			// The pushed branch has two commits: a shallow clone gets one,
			// --deepen 1 the other.
			"git clone -q --depth 1 -b openhands/git247 " + remote + " shallow",
			"cd shallow",
			"test \"$(git rev-parse --is-shallow-repository)\" = true",
			"test \"$(git rev-list --count HEAD)\" = 1",
			"git fetch -q --deepen 1 origin",
			"test \"$(git rev-list --count HEAD)\" = 2",
			"echo everyday-ok",
			"cd ../v2",
			"git push origin HEAD:main 2>&1 || echo main-refused=$?",
		}, "\n")
		code, out := d.execIn(c.ID, "sh", "-c", script)
		if code != 0 || !strings.Contains(out, "everyday-ok") {
			t.Fatalf("git 2.47 through the relay: %d\n%s\n--- ohd log ---\n%s", code, out, tail(d.logs.String(), 30))
		}
		t.Logf("git 2.47 run:\n%s", out)
		if !strings.Contains(out, "git version 2.47.") {
			t.Fatalf("the git that ran is not 2.47:\n%s", out)
		}
		if got := strings.TrimSpace(gitserver.Git(t, filepath.Join(srv.Root, "acme/widgets.git"), "log", "-1", "--format=%s", "refs/heads/openhands/git247")); got != "agent work 2.47" {
			t.Errorf("the push did not land: %q", got)
		}

		// The push to main: git 2.47 printed the relay's rejection.
		want := "! [remote rejected] HEAD -> main (ohd: pushing refs/heads/main is not granted; ohctl grant " + c.ID + " git " + srv.Host + "/acme --push 'refs/heads/main')"
		if !strings.Contains(out, "main-refused=") || !strings.Contains(out, want) {
			t.Errorf("push to main with git 2.47:\n%s\nwant %q", out, want)
		}

		// Which git spoke to the relay, and in which protocol: the trace says.
		trace, err := os.ReadFile(filepath.Join(hostWork, "trace"))
		if err != nil {
			t.Fatal(err)
		}
		agents := map[string]int{}
		for _, m := range regexp.MustCompile(`User-Agent: (\S+)`).FindAllSubmatch(trace, -1) {
			agents[string(m[1])]++
		}
		t.Logf("requests by User-Agent in the trace: %v", agents)
		if len(agents) == 0 {
			t.Error("the trace holds no request")
		}
		for agent := range agents {
			if !strings.HasPrefix(agent, "git/2.47.") {
				t.Errorf("a request in the trace came from another git than 2.47: %s", agent)
			}
		}
		if !bytes.Contains(trace, []byte("git< version 2")) {
			t.Error("the trace shows no protocol v2 exchange")
		}
		auths := bearer.Authorizations()
		if len(auths) == 0 {
			t.Error("the bearer host got no request")
		}
		for _, a := range auths {
			if a != "Bearer "+token {
				t.Error("the bearer host got a request without the bearer token")
			}
		}
		audit := d.ohctl("--json", "audit", c.ID, "--limit", "0")
		if !strings.Contains(audit, "push asked=refs/heads/main allowed= refused=refs/heads/main") ||
			!strings.Contains(audit, "push asked=refs/heads/openhands/git247 allowed=refs/heads/openhands/git247 refused=") {
			t.Errorf("the pushes of git 2.47 are not audited with their refs:\n%s", tail(audit, 20))
		}
	})
}
