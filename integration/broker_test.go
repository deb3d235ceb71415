package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

func brokerClient(c store.Conversation) *broker.Client {
	return broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"))
}

// TestBrokerThroughTheDaemon drives the broker the way a conversation
// uses it: secrets set and granted with ohctl, read over the socket;
// rotation; a daemon restart that keeps the token; the audit.
func TestBrokerThroughTheDaemon(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	ctx := context.Background()
	if _, err := d.ohctlIn("value-one\n", "secret", "set", "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ohctlIn("value-two", "secret", "set", "two"); err != nil {
		t.Fatal(err)
	}
	if out := d.ohctl("secret", "ls"); !strings.Contains(out, "one") || strings.Contains(out, "value-one") {
		t.Errorf("secret ls:\n%s", out)
	}
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.TempDir(t), "--grant-secret", "one")
	cl := brokerClient(c)
	if v, err := cl.Secret(ctx, "one"); err != nil || string(v) != "value-one" {
		t.Errorf("granted secret = %q, %v (one trailing newline is dropped)", v, err)
	}
	if _, err := cl.Secret(ctx, "two"); !errors.Is(err, broker.ErrNotGranted) {
		t.Errorf("ungranted secret: %v, want not granted", err)
	}
	d.ohctl("grant", c.ID, "secret", "two")
	if v, err := cl.Secret(ctx, "two"); err != nil || string(v) != "value-two" {
		t.Errorf("after grant: %q, %v", v, err)
	}

	// Rotation: the old token is refused at once, the new one works.
	oldToken, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
	d.ohctl("token", "rotate", c.ID)
	stale := filepath.Join(testenv.TempDir(t), "old-token")
	if err := os.WriteFile(stale, oldToken, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), stale).Whoami(ctx); !errors.Is(err, broker.ErrUnauthenticated) {
		t.Errorf("old token after rotate: %v, want unauthenticated", err)
	}
	if _, err := cl.Whoami(ctx); err != nil {
		t.Errorf("new token: %v", err)
	}

	// A restart: same directory, same token, answers again.
	token, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
	dirBefore, _ := os.Stat(c.BrokerDir)
	d.restart()
	if now, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token")); string(now) != string(token) {
		t.Error("the token changed across a restart")
	}
	if dirAfter, _ := os.Stat(c.BrokerDir); !os.SameFile(dirBefore, dirAfter) {
		t.Error("the broker directory was re-created: a container's bind mount would lose it")
	}
	if _, err := broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token")).Whoami(ctx); err != nil {
		t.Errorf("after restart: %v", err)
	}

	// Audit: every request above, with names and no values.
	out := d.ohctl("audit", c.ID)
	for _, want := range []string{"GET /v1/secrets/{name}", "one", "two", "allowed", "refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"value-one", "value-two", strings.TrimSpace(string(token))} {
		if strings.Contains(out, secret) || strings.Contains(d.logs.String(), secret) {
			t.Errorf("a secret value or token appears in the audit or the log")
		}
	}
	// Ending the conversation revokes it: the socket is gone.
	d.ohctl("rm", c.ID)
	if _, err := os.Stat(c.BrokerDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("broker dir after rm: %v", err)
	}
}

// TestBackendGitCredentialsInsideAContainer: real git in a conversation's
// container, with ohd's credential helper (the static ohctl mounted at
// /run/ohd/bin/ohctl), gets the password for a host granted with
// --git-relay=false and nothing for another.
func TestBackendGitCredentialsInsideAContainer(t *testing.T) {
	eachBackend(t, gitCredentialsInsideAContainer)
}

func gitCredentialsInsideAContainer(t *testing.T, b backend) {
	d := b.daemon(t)
	if _, err := d.ohctlIn("ghp-very-secret-token", "secret", "set", "gh"); err != nil {
		t.Fatal(err)
	}
	d.ohctl("git-host", "set", "github.com", "--secret", "gh")
	d.ohctl("git-host", "set", "gitlab.com", "--secret", "gh")
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree", "--grant-git", "github.com/my-org")
	// The credential-helper route (a relayed grant hands out no password:
	// TestGitRelayInsideAContainer).
	d.ohctl("grant", c.ID, "git", "github.com/my-org", "--git-relay=false")
	if show := d.ohctl("show", c.ID); !strings.Contains(show, "github.com/my-org (credential helper: the token enters the container)") {
		t.Errorf("ohctl show does not name the credential-helper route:\n%s", show)
	}
	fill := func(url string) (int, string) {
		return d.execIn(c.ID, "sh", "-c", "printf 'url="+url+"\\n\\n' | GIT_TERMINAL_PROMPT=0 git -C "+c.Worktree+" credential fill")
	}
	code, out := fill("https://github.com/my-org/repo.git")
	if code != 0 || !strings.Contains(out, "password=ghp-very-secret-token") || !strings.Contains(out, "username=x-access-token") {
		t.Errorf("granted path: %d %q", code, out)
	}
	if code, out := fill("https://github.com/other-org/repo.git"); code == 0 || strings.Contains(out, "ghp-very-secret-token") {
		t.Errorf("outside the path prefix: %d %q, want no credential", code, out)
	}
	if code, out := fill("https://gitlab.com/my-org/repo.git"); code == 0 || strings.Contains(out, "ghp-very-secret-token") {
		t.Errorf("ungranted host: %d %q, want no credential", code, out)
	}
	d.ohctl("rm", "--discard", c.ID)
}
