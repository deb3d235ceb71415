package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendGitViewLiveBothWays: the agent's side branch (on a host commit) and
// annotated tag are on the host under refs/ohd/live/<id>/ within a
// second; the host deletes the branch the side branch came from, expires
// its reflogs and prunes, and the view is intact; the host's new commit
// on main reaches the agent with `git fetch host`; the view shows no
// refs/ohd/; the removal keeps the side branch and the annotated tag,
// lists them, and drops the mirror (issue 19, acceptance 7).
func TestBackendGitViewLiveBothWays(t *testing.T) {
	eachBackend(t, gitViewLiveBothWays)
}

func gitViewLiveBothWays(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	git := func(args ...string) string {
		return strings.TrimSpace(testenv.Git(t, repo, append([]string{"-c", "safe.directory=*"}, args...)...))
	}
	main := git("symbolic-ref", "--short", "HEAD")
	git("checkout", "-q", "-b", "feature")
	git("commit", "-q", "--allow-empty", "-m", "feature work")
	feature := git("rev-parse", "HEAD")
	git("checkout", "-q", main)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	var other store.Conversation
	d.ohctlJSON(&other, "create", "--repo", repo, "--worktree")
	d.inside(other, "git branch other-side") // mirrored for the other conversation

	t0 := time.Now()
	tag := d.inside(c, "git branch side feature && git -c user.name=a -c user.email=a@x tag -a -m 'agent tag' v-agent HEAD && git rev-parse v-agent")
	waitHostRef(t, repo, "refs/ohd/live/"+c.ID+"/heads/side", feature, 5*time.Second)
	waitHostRef(t, repo, "refs/ohd/live/"+c.ID+"/tags/v-agent", tag, 5*time.Second)
	t.Logf("side branch and tag on the host %v after the agent made them", time.Since(t0).Round(time.Millisecond))
	if time.Since(t0) > 2*time.Second {
		t.Errorf("the mirror took %v, want about a second", time.Since(t0))
	}
	if out := d.inside(c, "git for-each-ref refs/ohd/ && git ls-remote host"); strings.Contains(out, "refs/ohd/") || strings.Contains(out, other.ID) {
		t.Errorf("the view shows ohd's or another conversation's refs:\n%s", out)
	}

	git("branch", "-D", "feature")
	git("reflog", "expire", "--expire=now", "--all")
	git("gc", "-q", "--prune=now")
	if got := d.inside(c, "git log -1 --format=%s side"); got != "feature work" {
		t.Errorf("the view's side branch after the host's gc: %q", got)
	}

	git("commit", "-q", "--allow-empty", "-m", "the host moves on")
	moved := git("rev-parse", "HEAD")
	waitFor(t, 5*time.Second, "git fetch host to bring the host's new commit", func() bool {
		return d.inside(c, "git fetch -q host && git rev-parse refs/remotes/host/"+main) == moved
	})

	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	for _, want := range []string{"refs/ohd/kept/" + c.ID + "/heads/side", "refs/ohd/kept/" + c.ID + "/tags/v-agent"} {
		if !slices.Contains(rm.Removal.Kept, want) {
			t.Errorf("removal kept %v, want %s", rm.Removal.Kept, want)
		}
	}
	if got := git("cat-file", "-t", "refs/ohd/kept/"+c.ID+"/tags/v-agent"); got != "tag" {
		t.Errorf("the kept tag is a %s, want the annotated tag", got)
	}
	if out := git("for-each-ref", "refs/ohd/live/"+c.ID+"/"); out != "" {
		t.Errorf("the live mirror is left after removal:\n%s", out)
	}
	git("fsck", "--strict", "--no-dangling")
}

// TestBackendGitViewRefusalsVisible: the agent in its container commits a
// .gitmodules whose update runs a command, then a commit on top, then
// points its branch at a blob: each is refused, none of their objects
// reaches the host's store (its fsck stays clean), `ohctl show` and
// `ohctl doctor` (FAIL) say why, the metric counts the refusal by reason,
// and the refusal is logged once, not at every commit (issue 19,
// acceptance 2 and 3).
func TestBackendGitViewRefusalsVisible(t *testing.T) {
	eachBackend(t, gitViewRefusalsVisible)
}

func gitViewRefusalsVisible(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	evil := d.inside(c, `printf '[submodule "x"]\n\tpath = x\n\turl = ./x\n\tupdate = !sh -c evil\n' > .gitmodules && git add .gitmodules && git -c user.name=a -c user.email=a@x commit -q -m evil && git rev-parse HEAD`)
	waitFor(t, 10*time.Second, "ohctl show to report the refusal", func() bool {
		return strings.Contains(d.ohctl("show", c.ID), "gitmodulesUpdate")
	})
	var top string
	for i := range 5 {
		top = d.inside(c, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m 'on top "+string(rune('0'+i))+"' && git rev-parse HEAD")
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	for _, oid := range []string{evil, top} {
		if _, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "cat-file", "-e", oid); err == nil {
			t.Errorf("%s of a refused publish is in the host's store", oid)
		}
	}
	if got := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); got != c.StartCommit {
		t.Errorf("host branch moved to %s", got)
	}
	testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
	doctor, _ := d.ohctlErr("doctor", c.ID)
	if !strings.Contains(doctor, "FAIL") || !strings.Contains(doctor, "invalid_objects") {
		t.Errorf("ohctl doctor does not FAIL the refused publish:\n%s", doctor)
	}
	warns := 0
	for _, l := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(l, c.ID) && strings.Contains(l, "publish failed") && strings.Contains(l, `"level":"WARN"`) {
			warns++
		}
	}
	if warns != 1 {
		t.Errorf("the refusal was logged at warning level %d times over 6 commits, want once", warns)
	}

	// The branch on a blob (a loose ref the agent writes itself: git's
	// update-ref would refuse it).
	d.inside(c, "git reset -q --hard "+c.StartCommit+" && blob=$(echo not a commit | git hash-object -w --stdin) && echo $blob > $(git rev-parse --git-common-dir)/refs/heads/"+c.Branch)
	waitFor(t, 70*time.Second, "ohctl show to report the blob", func() bool {
		return strings.Contains(d.ohctl("show", c.ID), "not_a_commit")
	})
	body := d.call("GET", "/metrics", nil)
	m := scrape(t, string(body.Body))
	for _, reason := range []string{"invalid_objects", "not_a_commit"} {
		if n := m[`ohd_publish_failures_total{reason="`+reason+`"}`]; n < 1 {
			t.Errorf("ohd_publish_failures_total{reason=%q} = %v, want >= 1", reason, n)
		}
	}
	testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
}

// TestBackendGitViewImportLimitFlag: `ohd serve --import-max-pack 4k` refuses a
// commit whose pack is larger: the host branch stays, show and doctor
// say pack_too_large, the metric counts it, nothing enters the host's
// store.
func TestBackendGitViewImportLimitFlag(t *testing.T) {
	eachBackend(t, gitViewImportLimitFlag)
}

func gitViewImportLimitFlag(t *testing.T, b backend) {
	d := b.daemon(t, "--import-max-pack", "4k")
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	// 64 KiB that do not compress: the test image's shell has no
	// /dev/urandom reader, so git hashes its way to incompressible bytes.
	tip := d.inside(c, `s=x; n=0; while [ $n -lt 1700 ]; do s=$(echo $s | git hash-object --stdin); printf '%s' $s >> big.bin; n=$((n+1)); done; git add big.bin && git -c user.name=a -c user.email=a@x commit -q -m big && git rev-parse HEAD`)
	waitFor(t, 15*time.Second, "ohctl show to report the oversized pack", func() bool {
		return strings.Contains(d.ohctl("show", c.ID), "pack_too_large")
	})
	if got := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "rev-parse", "refs/heads/"+c.Branch)); got != c.StartCommit {
		t.Errorf("host branch moved to %s", got)
	}
	if _, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "cat-file", "-e", tip); err == nil {
		t.Errorf("the refused commit %s is in the host's store", tip)
	}
	if doctor, _ := d.ohctlErr("doctor", c.ID); !strings.Contains(doctor, "FAIL") || !strings.Contains(doctor, "pack_too_large") {
		t.Errorf("ohctl doctor does not FAIL the oversized pack:\n%s", doctor)
	}
	m := scrape(t, string(d.call("GET", "/metrics", nil).Body))
	if n := m[`ohd_publish_failures_total{reason="pack_too_large"}`]; n < 1 {
		t.Errorf(`ohd_publish_failures_total{reason="pack_too_large"} = %v, want >= 1`, n)
	}
	testenv.Git(t, repo, "-c", "safe.directory=*", "fsck", "--strict", "--no-dangling")
}
