package conversation

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// archiveRuntime is the local runtime with a container whose files are
// the archives of files (by path in the container).
type archiveRuntime struct {
	runtime.Runtime
	files   map[string][]byte
	stopped bool
}

func (r *archiveRuntime) Stop(context.Context, string, time.Duration) error {
	r.stopped = true
	return nil
}

func (r *archiveRuntime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	return runtime.Container{ID: id, WorkingDir: "/srv"}, nil
}

func (r *archiveRuntime) Archive(_ context.Context, _ string, p string) (io.ReadCloser, error) {
	b, ok := r.files[p]
	if !ok {
		return nil, fmt.Errorf("%w: no %s", runtime.ErrNotFound, p)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func tarFiles(t *testing.T, files ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+1 < len(files); i += 2 {
		if err := tw.WriteHeader(&tar.Header{Name: files[i], Typeflag: tar.TypeReg, Size: int64(len(files[i+1])), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(files[i+1]))
	}
	_ = tw.Close()
	return b.Bytes()
}

// TestCopyInnerOut: the previous release's state under the container's
// WORKDIR/workspace lands in the host directories; an archive with a name
// that climbs out is refused and changes nothing on the host.
func TestCopyInnerOut(t *testing.T) {
	e := newEnv(t)
	e.m.cfg.InnerRoot = filepath.Join(e.stateDir, "inner")
	c := store.Conversation{ID: store.NewID(), UID: os.Getuid(), GID: os.Getgid(), ContainerID: "c0ffee"}
	if err := e.m.writeInnerState(c, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	d := openhands.DirsOf(e.m.cfg.InnerRoot, c.ID)

	rt := &archiveRuntime{Runtime: runtime.NewLocal(), files: map[string][]byte{
		"/srv/workspace/conversations": tarFiles(t, "conversations/abc/meta.json", "{}"),
		"/srv/workspace/bash_events":   tarFiles(t, "bash_events/../../escape", "x"),
	}}
	e.m.rt = rt
	if _, err := e.m.copyInnerOut(context.Background(), c); err == nil || !strings.Contains(err.Error(), "climbs out") {
		t.Fatalf("copy of a hostile archive = %v, want a refusal", err)
	}
	for _, dir := range append(d.Mounted(), d.Persistence) {
		ents, _ := os.ReadDir(dir)
		if dir == d.Home && len(ents) == 1 && ents[0].Name() == ".openhands" {
			continue // Persistence, checked itself
		}
		if len(ents) != 0 {
			t.Errorf("%s after a refused copy: %v, want it empty", dir, ents)
		}
	}
	if ents, _ := os.ReadDir(d.Root); len(ents) != len(d.Mounted()) {
		t.Errorf("%s after a refused copy holds %d entries, want only the state directories", d.Root, len(ents))
	}

	rt.files["/srv/workspace/bash_events"] = tarFiles(t, "bash_events/e1", "y")
	rt.files["/srv/workspace/.openhands"] = tarFiles(t, ".openhands/settings.json", `{"a":1}`)
	note, err := e.m.copyInnerOut(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !rt.stopped || !strings.Contains(note, "3 files") {
		t.Errorf("stopped %v, note %q: want the container stopped and 3 files copied", rt.stopped, note)
	}
	for p, want := range map[string]string{
		filepath.Join(d.Conversations, "abc", "meta.json"): "{}",
		filepath.Join(d.BashEvents, "e1"):                  "y",
		filepath.Join(d.Persistence, "settings.json"):      `{"a":1}`,
	} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s = %q %v, want %q", p, b, err, want)
		}
	}
}
