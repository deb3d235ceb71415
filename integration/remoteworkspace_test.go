package integration

import (
	"archive/zip"
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendRemoteWorkspaceWithoutUpstream: issue 18 point 10, the SDK's
// RemoteWorkspace against ohd with no upstream. /server_info answers
// without a key from ohd itself and, once a conversation of the image
// exists, names conversation_runtime_routes_v1; the scoped routes it then
// steers the client to (terminal, git changes, file download) reach the
// conversation's container. TestBackendCanvasWholeSession covers the same with
// an upstream.
func TestBackendRemoteWorkspaceWithoutUpstream(t *testing.T) {
	eachBackend(t, remoteWorkspaceWithoutUpstream)
}

func remoteWorkspaceWithoutUpstream(t *testing.T, b backend) {
	testenv.RequireRoot(t)
	d := b.daemon(t)
	var info struct{ Capabilities []string }
	if r := d.call("GET", "/server_info", nil, "X-Session-API-Key", ""); r.Status != http.StatusOK {
		t.Fatalf("GET /server_info without a key = %d %s", r.Status, r.Body)
	}
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})
	d.call("GET", "/server_info", nil, "X-Session-API-Key", "").json(t, &info)
	if !slices.Contains(info.Capabilities, "conversation_runtime_routes_v1") {
		t.Fatalf("/server_info capabilities = %v, want conversation_runtime_routes_v1 once a conversation of the image exists", info.Capabilities)
	}
	base := "/api/conversations/" + id
	var out struct {
		ExitCode *int `json:"exit_code"`
		Stdout   *string
	}
	r := d.call("POST", base+"/bash/execute_bash_command", map[string]any{"command": "echo sdk > sdk.txt && pwd", "cwd": repo})
	r.json(t, &out)
	if r.Status != http.StatusOK || out.ExitCode == nil || *out.ExitCode != 0 || out.Stdout == nil || *out.Stdout != repo+"\n" {
		t.Fatalf("scoped execute_bash_command = %d %s", r.Status, r.Body)
	}
	var changes []struct{ Status, Path string }
	d.call("GET", base+"/git/changes?path="+repo, nil).json(t, &changes)
	if len(changes) != 1 || changes[0].Path != "sdk.txt" || changes[0].Status != "ADDED" {
		t.Errorf("scoped git/changes = %+v, want sdk.txt ADDED", changes)
	}
	if r := d.call("GET", base+"/file/download?path="+filepath.Join(repo, "sdk.txt"), nil); r.Status != http.StatusOK || string(r.Body) != "sdk\n" {
		t.Errorf("scoped file/download = %d %q", r.Status, r.Body)
	}
	if b, err := os.ReadFile(filepath.Join(repo, "sdk.txt")); err != nil || strings.TrimSpace(string(b)) != "sdk" {
		t.Errorf("the file on the host = %q, %v", b, err)
	}

	// The SDK v1.43.1's own calls, without cid (issue 28 acceptance 5):
	// execute_command starts a command in a cwd and polls its output by
	// the command's id; git changes and file download name a path. Each
	// reaches the conversation whose working directory holds the path.
	var started struct{ ID string }
	r = d.call("POST", "/api/bash/start_bash_command", map[string]any{"command": "echo global > global.txt && pwd", "cwd": repo, "timeout": 30})
	r.json(t, &started)
	if r.Status != http.StatusOK || started.ID == "" {
		t.Fatalf("start_bash_command without cid = %d %s, want the conversation's answer", r.Status, r.Body)
	}
	var page struct {
		Items []struct {
			ExitCode *int `json:"exit_code"`
			Stdout   string
		} `json:"items"`
	}
	waitFor(t, 30*time.Second, "the command's output through the global search", func() bool {
		page.Items = nil
		d.call("GET", "/api/bash/bash_events/search?command_id__eq="+started.ID+"&kind__eq=BashOutput&sort_order=TIMESTAMP&limit=100", nil).json(t, &page)
		return len(page.Items) > 0 && page.Items[len(page.Items)-1].ExitCode != nil
	})
	if out := page.Items[len(page.Items)-1]; *out.ExitCode != 0 || !strings.Contains(out.Stdout, repo) {
		t.Errorf("the command's output = %+v, want it run in %s", page.Items, repo)
	}
	changes = nil
	d.call("GET", "/api/git/changes?path="+repo, nil).json(t, &changes)
	if len(changes) != 2 {
		t.Errorf("global git/changes by path = %+v, want sdk.txt and global.txt", changes)
	}
	if r := d.call("GET", "/api/file/download?path="+filepath.Join(repo, "global.txt"), nil); r.Status != http.StatusOK || string(r.Body) != "global\n" {
		t.Errorf("global file/download by path = %d %q", r.Status, r.Body)
	}
	// "Download conversation" (Canvas calls it without cid): the zip of
	// the conversation's directory, made by its own server.
	r = d.call("GET", "/api/file/download-trajectory/"+id, nil)
	hex := strings.ReplaceAll(id, "-", "")
	zr, err := zip.NewReader(bytes.NewReader(r.Body), int64(len(r.Body)))
	if r.Status != http.StatusOK || err != nil {
		t.Errorf("download-trajectory = %d %v (%d bytes), want a zip", r.Status, err, len(r.Body))
	} else {
		var names []string
		for _, f := range zr.File {
			names = append(names, f.Name)
		}
		if !slices.Contains(names, hex+"/meta.json") || !slices.Contains(names, hex+"/") {
			t.Errorf("download-trajectory zip holds %v, want %s/ and its meta.json", names, hex)
		}
	}
	if r := d.call("GET", "/api/file/download-trajectory/"+store.NewID(), nil); r.Status != http.StatusNotFound {
		t.Errorf("download-trajectory of an unknown conversation = %d, want 404", r.Status)
	}

	// Naming no conversation: an error that says how.
	if r := d.call("POST", "/api/bash/execute_bash_command", map[string]any{"command": "pwd"}); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "cid=") {
		t.Errorf("execute_bash_command naming no conversation = %d %s, want 404 saying how to name one", r.Status, r.Body)
	}
}
