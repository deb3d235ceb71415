package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// The harness of the host-git attack suite (issue 26, acceptance 1):
// the user's own git, run on the host as the repository's owner with git's
// default configuration; plants made from inside a conversation's
// container as its user; and markers the planted programs write where the
// agent cannot reach, so "nothing ran" is something the test saw.

// hostUser is the repository's owner running their own git on the host:
// uid 1000, a home of their own with no git config in it (no
// safe.directory, nothing ohd would add), the machine's system config, and
// no hardening of ohd's. Only an identity is set, through the environment,
// so the user's merge can make a commit.
type hostUser struct {
	t        testing.TB
	uid, gid int
	home     string
}

func newHostUser(t testing.TB) *hostUser {
	t.Helper()
	testenv.RequireRoot(t)
	home := filepath.Join(testenv.TempDir(t), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, attackOwner, attackOwner); err != nil {
		t.Fatal(err)
	}
	return &hostUser{t: t, uid: attackOwner, gid: attackOwner, home: home}
}

// env is the user's environment: a login's, not a test's (no
// GIT_CONFIG_NOSYSTEM, no GIT_CONFIG_GLOBAL).
func (u *hostUser) env(extra ...string) []string {
	return append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + u.home,
		"USER=user", "LOGNAME=user",
		"LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=The User", "GIT_AUTHOR_EMAIL=user@example.com",
		"GIT_COMMITTER_NAME=The User", "GIT_COMMITTER_EMAIL=user@example.com",
	}, extra...)
}

// git runs the user's git with args in dir and returns its combined
// output. config, if any, are `-c` settings of the call.
func (u *hostUser) git(dir string, config []string, args ...string) (string, error) {
	var full []string
	for _, c := range config {
		full = append(full, "-c", c)
	}
	return u.run(dir, "git", append(full, args...)...)
}

// sh runs a shell script as the user (the controls' plants).
func (u *hostUser) sh(dir, script string, env ...string) (string, error) {
	return u.runEnv(dir, env, "sh", "-c", script)
}

func (u *hostUser) run(dir, name string, args ...string) (string, error) {
	return u.runEnv(dir, nil, name, args...)
}

func (u *hostUser) runEnv(dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, u.env(env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// markerBox is a root-owned host directory, bind-mounted into no
// container, where every planted program writes when it runs: the agent
// can neither see it nor clear it, and the program knows its path only
// from its own text. Mode 01733: the user's git (uid 1000) can add a file,
// cannot list or delete.
type markerBox struct {
	t   testing.TB
	dir string
}

func newMarkerBox(t testing.TB) *markerBox {
	t.Helper()
	dir := mustTempDir(t.(*testing.T), "ohd-hostgit-marker-")
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1733); err != nil {
		t.Fatal(err)
	}
	return &markerBox{t: t, dir: dir}
}

// program is the text of the program planted for tag: it appends a line
// to <box>/<tag> naming how it was called. It has no single quote, so a
// plant can write it with printf '%s' '...'.
func (m *markerBox) program(tag string) string {
	return "#!/bin/sh\necho \"fired $0 $* uid=$(id -u 2>/dev/null) pwd=$(pwd)\" >> " + filepath.Join(m.dir, tag) + "\nexit 0\n"
}

// fired returns the tags whose program ran, with what each wrote.
func (m *markerBox) fired() map[string]string {
	ents, _ := os.ReadDir(m.dir)
	out := map[string]string{}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(m.dir, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}

// clear forgets what tag's program wrote (after a self-test).
func (m *markerBox) clear(tag string) { _ = os.Remove(filepath.Join(m.dir, tag)) }

// plantPrelude is the shell the plants share, inside the container and in
// the controls on the host alike. G is the agent's git (its own identity;
// safe.directory in the command scope, as ohd gives the agent's git);
// mkrepo DIR makes DIR a repository with two commits of evil.txt and arms
// it; arm GITDIR makes a git dir run $EVIL: core.fsmonitor (status, diff),
// a textconv for every path (log -p, diff).
const plantPrelude = `G() { git -c user.name=agent -c user.email=agent@example.com -c init.defaultBranch=main -c safe.directory='*' -c protocol.file.allow=always "$@"; }
arm() { G --git-dir="$1" config core.fsmonitor "$EVIL" && G --git-dir="$1" config diff.evil.textconv "$EVIL" && mkdir -p "$1/info" && echo '* diff=evil' > "$1/info/attributes"; }
mkrepo() { mkdir -p "$1" && G init -q "$1" && printf one > "$1/evil.txt" && G -C "$1" add evil.txt && G -C "$1" commit -q -m one && printf two > "$1/evil.txt" && G -C "$1" commit -q -a -m two && arm "$1/.git"; }
step() { if out=$(eval "$1" 2>&1); then printf 'ok: %s\n' "$1"; else printf 'FAILED(%s): %s: %s\n' "$?" "$1" "$out"; fi; }
`

// plantScript is the script that plants steps (shell commands, each run
// on its own, its outcome reported as "ok: ..." or "FAILED(code): ...:
// output") after writing the marker program prog (text) at evil.
func plantScript(tools, evil, prog string, steps []string) string {
	var b strings.Builder
	if tools != "" {
		b.WriteString("export PATH=" + tools + ":$PATH\n")
	}
	b.WriteString("export EVIL=" + evil + "\n")
	b.WriteString(plantPrelude)
	b.WriteString(fmt.Sprintf("step %s\n", shQuote("mkdir -p "+filepath.Dir(evil)+" && printf '%s' "+shQuote(prog)+" > "+evil+" && chmod +x "+evil)))
	for _, s := range steps {
		b.WriteString("step " + shQuote(s) + "\n")
	}
	return b.String()
}

// shQuote quotes s for sh as one word.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// failedSteps returns the "FAILED" lines of a plant's output: where the
// container held the attack (EBUSY, EROFS, EACCES).
func failedSteps(out string) []string {
	var f []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAILED(") {
			f = append(f, l)
		}
	}
	return f
}

// ideScan lists what an editor's git integration opens under root: every
// directory to depth 3 (not entering .git, not following links) in which
// `git rev-parse --git-dir` succeeds as the user.
func ideScan(u *hostUser, root string) []string {
	var dirs []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		dirs = append(dirs, dir)
		if depth == 3 {
			return
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.IsDir() && e.Name() != ".git" {
				walk(filepath.Join(dir, e.Name()), depth+1)
			}
		}
	}
	walk(root, 0)
	var open []string
	for _, d := range dirs {
		if _, err := u.git(d, nil, "rev-parse", "--git-dir"); err == nil {
			open = append(open, d)
		}
	}
	sort.Strings(open)
	return open
}

// userTriggers are the user's everyday git commands the suite runs in
// every directory it checks.
var userTriggers = [][]string{{"status"}, {"diff"}, {"log", "-p", "-3"}}

// clipN shortens s for a report.
func clipN(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
