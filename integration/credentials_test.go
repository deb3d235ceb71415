package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendGitCredentialsNeverRestInTheContainer is the attack of an image or
// an agent that configures git's own credential helpers (store, cache)
// inside the container: git runs every configured helper, so with ohd's
// helper merely appended a fill followed by the approve git does after a
// successful clone writes the token to ~/.git-credentials (or the cache
// daemon), and after `ohctl revoke` that copy still answers. The
// container's git environment resets the helper list first, so neither
// helper sees the value and a revoke takes effect on the next request.
func TestBackendGitCredentialsNeverRestInTheContainer(t *testing.T) {
	eachBackend(t, gitCredentialsNeverRestInTheContainer)
}

func gitCredentialsNeverRestInTheContainer(t *testing.T, b backend) {
	d := b.daemon(t)
	const token = "ghp-must-not-rest-in-the-container"
	if _, err := d.ohctlIn(token, "secret", "set", "gh"); err != nil {
		t.Fatal(err)
	}
	d.ohctl("git-host", "set", "github.com", "--secret", "gh")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })

	// What git does around a clone: fill, then approve the answer (which
	// calls "store" on every configured helper).
	const fill = "printf 'protocol=https\\nhost=github.com\\npath=my-org/repo.git\\n\\n' | git credential fill"
	const fillApprove = "set -e; out=$(" + fill + "); printf '%s\\n\\n' \"$out\" | git credential approve; echo filled"
	for _, tc := range []struct{ name, configure string }{
		{"global store", "git config --global credential.helper store"},
		{"global cache", "git config --global credential.helper 'cache --timeout 3600'"},
		{"repository store", "git config credential.helper store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.ohctl("grant", c.ID, "git", "github.com", "--git-relay=false")
			// Each case starts clean: no helper configured, no stored file.
			const reset = ": > $HOME/.git-credentials; git config --global --unset-all credential.helper; "
			script := "cd " + c.Worktree + " && " + reset + tc.configure + " && " + fillApprove
			if code, out := d.execIn(c.ID, "sh", "-c", script); code != 0 || !strings.Contains(out, "filled") {
				t.Fatalf("fill and approve while granted: %d %q", code, out)
			}
			// The image has sh and git, no cat: read the file with sh.
			const show = "for f in $HOME/.git-credentials .git-credentials; do [ -f $f ] && while IFS= read -r l; do echo \"$f: $l\"; done < $f; done; true"
			if code, out := d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && "+show); code != 0 || strings.Contains(out, token) {
				t.Errorf("the token is at rest in the container: %d %q", code, out)
			}
			d.ohctl("revoke", c.ID, "git", "github.com")
			code, out := d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && "+fill)
			if code == 0 || strings.Contains(out, token) {
				t.Errorf("after revoke: fill = %d %q, want a refusal without the token (another helper answered from its copy)", code, out)
			}
		})
	}
}

// TestBackendRefusedCredentialUnderATerminal: git in a container, with a
// terminal (ohctl exec -t under script(1)'s pty: the container's own
// environment, nothing of ohctl's), asks for an ungranted
// host: it must not wait at a "Username for" prompt (GIT_TERMINAL_PROMPT=0
// in the container), and ohd's helper says which host and how to grant it.
func TestBackendRefusedCredentialUnderATerminal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		if _, err := exec.LookPath("script"); err != nil {
			testenv.Missing(t, "script(1) not found (install util-linux or bsdutils)")
		}
		d := b.daemon(t)
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
		t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })
		inner := "cd " + c.Worktree + " && printf 'url=https://ungranted.example/x.git\\n\\n' | git credential fill; echo exit=\\$?"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "script", "-qec", built.ohctl+" --socket "+d.socket+" exec -t "+c.ID+" -- sh -c \""+inner+"\"", "/dev/null")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("git waited at a terminal prompt for 30 s (no GIT_TERMINAL_PROMPT=0?): %q", out)
		}
		if err != nil {
			t.Fatalf("script: %v: %q", err, out)
		}
		s := string(out)
		if strings.Contains(s, "\nUsername for") || strings.HasPrefix(s, "Username for") || !strings.Contains(s, "terminal prompts disabled") || !strings.Contains(s, "exit=128") {
			t.Errorf("git under a terminal = %q, want a failure without a prompt", s)
		}
		if want := "ohd: ungranted.example/x.git is not granted to this conversation; on the host run: ohctl grant " + c.ID + " git ungranted.example"; !strings.Contains(s, want) {
			t.Errorf("git's output %q lacks %q", s, want)
		}
	})
}
