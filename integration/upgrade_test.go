package integration

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/openhands"
)

// previousRelease is the commit of the release before inner state
// directories (issue 19 point 9): its containers kept the agent server's
// state in their writable layer, and its test image's stand-in refuses
// any argument.
const previousRelease = "8b00fe3"

// TestUpgradeFromPreviousRelease: a conversation made by the previous
// release's ohd, with its test image, is taken over by this release on
// the same state directory. The inner server's state the previous
// release kept in the container (the real agent server wrote it under
// WORKDIR/workspace; the previous stand-in kept its state in memory, so
// the test places the real server's files there, with a symlink the
// hostile agent planted towards a host directory) is copied to the host
// directories before the container is made anew; the previous image,
// which refuses the new arguments, fails with a message naming the
// contract; with this release's image the conversation's events are
// served again, and the planted link reached nothing.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	// Docker only by design: it starts from earlier releases of ohd, which had only the Docker runtime.
	testenv.RequireRoot(t)
	testenv.RequireDocker(t)
	newImage := testimage.Ensure(t)
	oldOhd, oldImage := buildPreviousRelease(t)

	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	common := []string{"--memory", "268435456", "--ready-timeout", "60s"}
	d := startDaemon(t, daemonOptions{Runtime: "docker", Bin: oldOhd, Args: append([]string{"--image", oldImage}, common...)})
	t.Cleanup(func() { removeServerContainers(t, d) })
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true})
	old := d.record(id)
	if old.ContainerID == "" || old.Worktree == "" {
		t.Fatalf("the previous release's record %+v: want a container and a worktree", old)
	}
	oldCID := old.ContainerID

	// What the real agent server of the previous release left in the
	// container's writable layer.
	victim := testenv.TempDir(t)
	hexID := strings.ReplaceAll(id, "-", "")
	const message = "remember me from the previous release"
	now := time.Now().UTC().Format(time.RFC3339)
	ws := map[string]any{"kind": "LocalWorkspace", "working_dir": old.Worktree}
	conv := "workspace/conversations/" + hexID
	plant := tarOf(t, []tarEntry{
		{name: "workspace/", dir: true}, {name: "workspace/conversations/", dir: true}, {name: conv + "/", dir: true},
		{name: conv + "/meta.json", body: jsonOf(t, map[string]any{"id": id, "title": nil, "workspace": ws, "tags": map[string]any{}, "created_at": now, "updated_at": now})},
		{name: conv + "/base_state.json", body: jsonOf(t, map[string]any{"id": id, "workspace": ws, "persistence_dir": conv, "execution_status": "paused", "secret_registry": map[string]any{"secret_sources": map[string]any{}}})},
		{name: conv + "/events/", dir: true},
		{name: conv + "/events/event-00000-0a1b2c3d.json", body: jsonOf(t, map[string]any{"id": "0a1b2c3d", "kind": "MessageEvent", "source": "user",
			"llm_message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": message}}}})},
		{name: conv + "/escape", link: victim},
		{name: "workspace/.openhands/", dir: true},
		{name: "workspace/.openhands/settings.json", body: `{"from":"previous release"}`},
		{name: "workspace/.openhands/profiles", link: "/root"},
	})
	cp := dockerCmd("cp", "-", oldCID+":/")
	cp.Stdin = bytes.NewReader(plant)
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("docker cp the previous server's state into its container: %v\n%s", err, out)
	}

	d.stop()
	run(t, "docker", "stop", "-t", "5", oldCID)

	// This release, still configured with the previous image.
	d.restart(func(o *daemonOptions) { o.Bin = "" })
	r := d.call("GET", "/api/conversations/"+id+"/events/search", nil)
	if r.Status < 500 || !strings.Contains(string(r.Body), "agent server's contract") || !strings.Contains(string(r.Body), oldImage) {
		t.Errorf("events with the previous image = %d %s, want a failure naming the agent server's contract and the image", r.Status, r.Body)
	}
	inner := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), id)
	if _, err := os.Stat(filepath.Join(inner.StateDir(id), "events", "event-00000-0a1b2c3d.json")); err != nil {
		t.Errorf("the previous container's state is not on the host after the attempt: %v\n%s", err, tail(d.logs.String(), 30))
	}
	if err := dockerCmd("inspect", oldCID).Run(); err == nil {
		t.Error("the previous release's container is still there after its state was copied out")
	}

	// This release's image: the conversation comes back with its state.
	d.restart(func(o *daemonOptions) { o.Args = append([]string{"--image", newImage}, common...) })
	r = d.call("GET", "/api/conversations/"+id+"/events/search", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), message) {
		t.Fatalf("events after the upgrade = %d %s, want the message of the previous release\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
	}
	rec := d.record(id)
	if rec.InnerInContainer || rec.ContainerID == "" || rec.ContainerID == oldCID {
		t.Errorf("record after the upgrade: inner in container %v, container %s (old %s): want a new container of this release", rec.InnerInContainer, rec.ContainerID, oldCID)
	}
	if !strings.Contains(strings.Join(rec.Notes, "\n"), "copied out of its container") {
		t.Errorf("notes %q: want the copy mentioned", rec.Notes)
	}
	if b, err := os.ReadFile(filepath.Join(inner.Persistence, "settings.json")); err != nil || !strings.Contains(string(b), "previous release") {
		t.Errorf("settings.json on the host: %q %v", b, err)
	}
	// The hostile agent's links: not made, nothing reached through them.
	_ = filepath.WalkDir(inner.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type()&fs.ModeSymlink != 0 {
			t.Errorf("%s: a link of the old container was copied to the host", p)
		}
		if st, err := os.Lstat(p); err == nil {
			// The conversation's container is made anew by this release,
			// so it runs as the agent's own uid (issue 26), which owns
			// the copied state.
			if sys := st.Sys().(*syscall.Stat_t); sys.Uid != agentUID {
				t.Errorf("%s is owned by uid %d, want the agent's %d, the uid the upgraded conversation runs as", p, sys.Uid, agentUID)
			}
		}
		return nil
	})
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("the planted link's target got %v", ents)
	}

	// The upgraded conversation works on and is removed as any other:
	// the agent's work is kept, its inner state goes.
	if code, out := d.innerExec(id, "sh", "-c", "echo upgraded > "+rec.Worktree+"/after-upgrade.txt"); code != 0 {
		t.Fatalf("exec in the upgraded container: %d %s", code, out)
	}
	if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 {
		t.Fatalf("DELETE after the upgrade = %d %s", r.Status, r.Body)
	}
	if got := testenv.Git(t, repo, "-c", "safe.directory=*", "show", "refs/ohd/snapshots/"+id+":after-upgrade.txt"); got != "upgraded" {
		t.Errorf("snapshot after-upgrade.txt = %q, want the work of the upgraded conversation", got)
	}
	if _, err := os.Stat(inner.Root); err == nil {
		t.Errorf("%s is still there after the removal", inner.Root)
	}
}

// buildPreviousRelease builds the previous release's ohd (with its ohctl
// beside it) and its test image from its own sources, and returns the
// binary and the image's unique reference.
func buildPreviousRelease(t *testing.T) (ohdBin, image string) {
	t.Helper()
	return buildRelease(t, previousRelease)
}

// buildRelease builds the release at commit: its ohd (with its ohctl
// beside it) and its test image, from its own sources (a `git archive` of
// the commit: the clone's worktree registrations are left alone), and
// returns the binary and the image's unique reference.
func buildRelease(t *testing.T, commit string) (ohdBin, image string) {
	t.Helper()
	root := moduleRoot()
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		testenv.Missing(t, "the release commit %s is not in this clone (a shallow clone?): git fetch --unshallow", commit)
	}
	src := testenv.TempDir(t)
	if out, err := exec.Command("sh", "-c", `git -C "$0" archive --format=tar "$1" | tar -x -C "$2"`, root, commit, src).CombinedOutput(); err != nil {
		t.Fatalf("extract %s: %v\n%s", commit, err, out)
	}
	bin, err := os.MkdirTemp("", "ohd-previous-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	_ = os.Chmod(bin, 0o755)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	image = "ohd-test-agent-previous:" + hex.EncodeToString(b)
	for _, args := range [][]string{
		{"build", "-o", filepath.Join(bin, "ohd"), "./cmd/ohd"},
		{"build", "-o", filepath.Join(bin, "ohctl"), "./cmd/ohctl"},
		{"run", "./internal/testimage/cmd/build-test-image", "-ref", image},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release %s: go %v: %v\n%s", commit, args, err, out)
		}
	}
	t.Cleanup(func() { _ = dockerCmd("rmi", "-f", image).Run() })
	return filepath.Join(bin, "ohd"), image
}

type tarEntry struct {
	name, body, link string
	dir              bool
}

// tarOf writes entries as a tar owned by uid 1000, as the agent's files.
func tarOf(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o600, Uid: 1000, Gid: 1000, Typeflag: tar.TypeReg, Size: int64(len(e.body)), ModTime: time.Now()}
		switch {
		case e.dir:
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o700, 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode, h.Size = tar.TypeSymlink, e.link, 0o777, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
