package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Doctor, restore and a re-created id for conversations that worked in
// place (issue 18 points 1 and 10, the follow-up): doctor checks the view
// inside and reports no worktree check that does not apply; ohctl restore
// brings back the commits and says where the files are, or says clearly
// that there is nothing to restore; re-creating the id while its commits
// are kept on openhands/<id> is refused (409) without touching them.

// doctorChecks runs ohctl --json doctor ID.
func (d *daemon) doctorChecks(id string) []control.DoctorCheck {
	d.t.Helper()
	var rep control.DoctorReport
	out, _ := d.ohctlErr("--json", "doctor", id)
	if err := jsonUnmarshal(out, &rep); err != nil {
		d.t.Fatalf("doctor --json: %v: %s", err, out)
	}
	return rep.Checks
}

func TestBackendInPlaceDoctor(t *testing.T) {
	eachBackend(t, inPlaceDoctor)
}

func inPlaceDoctor(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := ownedRepo(t)
	linked := filepath.Join(filepath.Dir(repo), "linked")
	hostGit(t, repo, "worktree", "add", "-q", "-b", "topic", linked)
	testenv.ChownR(t, filepath.Dir(repo), attackOwner, attackOwner)
	for _, folder := range []string{repo, linked} {
		t.Run(filepath.Base(folder), func(t *testing.T) {
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", folder)
			if !c.InPlace {
				t.Fatalf("create = %+v, want in place", c)
			}
			got := map[string]control.DoctorCheck{}
			for _, ck := range d.doctorChecks(c.ID) {
				got[ck.Check] = ck
				if ck.Status == "warn" && b.expectedWarning(ck.Check) {
					continue
				}
				if ck.Status != "ok" {
					t.Errorf("doctor of a healthy in-place conversation: %s %s: %s", ck.Check, ck.Status, ck.Detail)
				}
			}
			for _, want := range []string{"inplace-host", "inplace-container", "publish", "container-hardening", "broker"} {
				if _, ok := got[want]; !ok {
					t.Errorf("doctor has no %s check: %+v", want, got)
				}
			}
			for _, not := range []string{"worktree-host", "worktree-container"} {
				if ck, ok := got[not]; ok {
					t.Errorf("doctor runs the worktree check %s in place: %+v", not, ck)
				}
			}
			if ck := got["inplace-container"]; !strings.Contains(ck.Detail, "## "+c.ViewBranch) {
				t.Errorf("inplace-container = %q, want git status on %s", ck.Detail, c.ViewBranch)
			}
			// The view gone: git inside fails, and doctor says why.
			if err := os.RemoveAll(c.GitView); err != nil {
				t.Fatal(err)
			}
			got = map[string]control.DoctorCheck{}
			for _, ck := range d.doctorChecks(c.ID) {
				got[ck.Check] = ck
			}
			for _, name := range []string{"inplace-host", "inplace-container"} {
				if ck := got[name]; ck.Status != "fail" || !strings.Contains(ck.Detail, "git view "+c.GitView) || !strings.Contains(ck.Detail, "ohctl rm --discard "+c.ID) {
					t.Errorf("%s with the view gone = %+v", name, ck)
				}
			}
			d.ohctl("rm", "--discard", c.ID)
		})
	}
}

func TestBackendInPlaceRestoreAndRecreate(t *testing.T) {
	eachBackend(t, inPlaceRestoreAndRecreate)
}

func inPlaceRestoreAndRecreate(t *testing.T, b backend) {
	d := b.daemon(t)
	repo := ownedRepo(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo)
	d.insideAt(c, repo, "echo one > one.txt && git add one.txt && "+gitID+"commit -q -m one && echo wip > wip.txt")
	tip := d.insideAt(c, repo, "git rev-parse HEAD")
	waitHostRef(t, repo, "refs/heads/openhands/"+c.ID, tip, 5*time.Second)
	var rm store.Conversation
	d.ohctlJSON(&rm, "rm", c.ID)
	if rm.Removal == nil || !rm.Removal.BranchKept {
		t.Fatalf("rm = %+v, want the branch kept", rm.Removal)
	}
	refs := hostGit(t, repo, "for-each-ref")

	// Re-creating the id: refused, the kept branch untouched.
	out, err := d.ohctlErr("create", "--repo", repo, "--id", c.ID)
	if err == nil {
		t.Fatalf("re-create with the branch kept succeeded: %s", out)
	}
	for _, w := range []string{"earlier work is kept", "branch openhands/" + c.ID, "ohctl restore " + c.ID} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal %q lacks %q", err, w)
		}
	}
	// Through the conversation API (Canvas, the SDK): the same, as a 409.
	if r := d.call("POST", "/api/conversations", map[string]any{"conversation_id": c.ID, "workspace": map[string]any{"working_dir": repo}, "worktree": false}); r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "ohctl restore "+c.ID) {
		t.Errorf("API re-create with the branch kept = %d %s, want 409 naming ohctl restore", r.Status, r.Body)
	}
	if got := hostGit(t, repo, "for-each-ref"); got != refs {
		t.Errorf("the refused re-create changed the refs:\n%s\nwant\n%s", got, refs)
	}
	if _, err := os.Stat(filepath.Join(repo, "wip.txt")); err != nil {
		t.Errorf("the folder lost wip.txt: %v", err)
	}

	// Restore: the commits in a new worktree, and where the files are.
	into := repo + ".restored"
	var res control.RestoreResult
	d.ohctlJSON(&res, "restore", c.ID, "--into", into)
	if res.Path != into || res.Snapshot != "" || !strings.Contains(res.Note, "its files are in "+repo) {
		t.Errorf("restore = %+v", res)
	}
	if got := hostGit(t, into, "rev-parse", "HEAD"); got != tip {
		t.Errorf("the restored worktree is at %s, want %s", got, tip)
	}
	if b, err := os.ReadFile(filepath.Join(into, "one.txt")); err != nil || string(b) != "one\n" {
		t.Errorf("restored one.txt = %q, %v", b, err)
	}
	hostGit(t, repo, "worktree", "remove", "--force", into)

	// A conversation with no commit: nothing to restore, said clearly.
	var c2 store.Conversation
	d.ohctlJSON(&c2, "create", "--repo", repo)
	d.ohctlJSON(&rm, "rm", c2.ID)
	out, err = d.ohctlErr("restore", c2.ID)
	if err == nil || !strings.Contains(err.Error(), "worked in place and made no commit") || !strings.Contains(err.Error(), "its files are in "+repo) {
		t.Errorf("restore of an in-place conversation without commits = %v: %s", err, out)
	}
	// Its id has nothing kept: it is created again, as the server does.
	var again store.Conversation
	d.ohctlJSON(&again, "create", "--repo", repo, "--id", c2.ID)
	if again.ID != c2.ID || !again.InPlace {
		t.Errorf("re-create of %s = %+v", c2.ID, again)
	}
	d.ohctl("rm", again.ID)
}
