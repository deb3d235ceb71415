package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendWorkspaceRootFlag: issue 18 point 2, the flag end to end. Without
// an upstream, `ohd serve --workspace-root DIR` is the only root: a
// create through the conversation API whose working_dir is missing below
// DIR gets the folder made (owned by DIR's owner) and starts without a
// worktree; one outside is a 400 naming the flag and makes nothing.
func TestBackendWorkspaceRootFlag(t *testing.T) {
	eachBackend(t, workspaceRootFlag)
}

func workspaceRootFlag(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	root := testenv.TempDir(t)
	if err := os.Chown(root, attackOwner, attackOwner); err != nil {
		t.Fatal(err)
	}
	d := b.daemon(t, "--workspace-root", root)
	dir := filepath.Join(root, "workspace", "project", "f00d")
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": dir}, "worktree": true})
	// ownedBy checks p is a directory of the root's owner (read through
	// the loan of a conversation's folder to the agent, issue 26) whose
	// owner is now uid now.
	ownedBy := func(p string, now uint32) {
		t.Helper()
		uid, gid, err := gitboundary.OwnerOf(p)
		var st syscall.Stat_t
		if err == nil {
			err = syscall.Lstat(p, &st)
		}
		if err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR || uid != attackOwner || gid != attackOwner || st.Uid != now {
			t.Errorf("%s: %v owner %d:%d (uid %d now), want a directory of %d (the root's owner), now of uid %d", p, err, uid, gid, st.Uid, attackOwner, now)
		}
	}
	ownedBy(filepath.Join(root, "workspace"), attackOwner)
	ownedBy(dir, agentUID) // lent to the agent while the conversation lives
	if c := d.record(id); c.WorkingDir != dir || c.Worktree != "" || c.State != store.StateRunning {
		t.Errorf("the conversation in the new folder = %+v", c)
	}
	if code, out := d.execIn(id, "sh", "-c", "echo hi > "+filepath.Join(dir, "hi.txt")); code != 0 {
		t.Errorf("writing the new folder inside: %d %s", code, out)
	}
	outside := filepath.Join(testenv.TempDir(t), "not", "allowed")
	r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": outside}, "worktree": true})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "--workspace-root") {
		t.Errorf("create outside the root = %d %s, want 400 naming --workspace-root", r.Status, r.Body)
	}
	if _, err := os.Stat(filepath.Dir(outside)); !os.IsNotExist(err) {
		t.Errorf("a refused create made %s (%v)", filepath.Dir(outside), err)
	}
	if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != http.StatusOK {
		t.Errorf("delete = %d %s", r.Status, r.Body)
	}
	ownedBy(dir, attackOwner) // given back at the end

	// Canvas's isolated mode (issue 28 acceptance 7): working_dir
	// /workspace, which does not exist on this host, gets a fresh folder
	// of its own under the root.
	if _, err := os.Lstat("/workspace"); err == nil {
		t.Skip("this host has a /workspace: ohd takes it as the folder it is")
	}
	iso, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": "/workspace"}})
	want := filepath.Join(root, strings.ReplaceAll(iso, "-", ""))
	if c := d.record(iso); c.WorkingDir != want {
		t.Errorf("isolated-mode create: working dir %q, want a fresh %s of the root's owner", c.WorkingDir, want)
	}
	ownedBy(want, agentUID)
	var info struct {
		Workspace struct {
			WorkingDir string `json:"working_dir"`
		} `json:"workspace"`
	}
	d.call("GET", "/api/conversations/"+iso, nil).json(t, &info)
	if info.Workspace.WorkingDir != want {
		t.Errorf("the isolated conversation's info says working_dir %q, want %s", info.Workspace.WorkingDir, want)
	}
	if _, err := os.Lstat("/workspace"); err == nil {
		t.Errorf("the isolated-mode create made /workspace on the host")
	}
}
