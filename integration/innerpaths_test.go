package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
)

// TestInnerBashEvents: the terminal routes of a conversation work for the
// repository owner's uid. The agent server writes its bash events to the
// relative workspace/bash_events, i.e. /workspace/bash_events in its
// image, which belongs to uid 10001 (the test image has the same
// layout); the stand-in fails there as the real server does (500), so
// this test fails if ohd stops setting OH_BASH_EVENTS_DIR to the
// conversation's host directory (openhands.Env, paths.go).
func TestInnerBashEvents(t *testing.T) {
	// The test image has a shell and no coreutils: the uid and hostname
	// read with builtins.
	const whoAndWhere = `while read k v rest; do [ "$k" = Uid: ] && echo $v; done < /proc/self/status; read h < /proc/sys/kernel/hostname; echo $h`
	testenv.RequireRoot(t)
	d := dockerDaemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})

	r := d.call("POST", "/api/bash/execute_bash_command?cid="+id, map[string]any{"command": whoAndWhere, "cwd": "/"})
	var out struct {
		Kind     string `json:"kind"`
		Stdout   string `json:"stdout"`
		ExitCode *int   `json:"exit_code"`
	}
	r.json(t, &out)
	if r.Status != http.StatusOK || out.Kind != "BashOutput" || out.ExitCode == nil || *out.ExitCode != 0 || out.Stdout != "1000\nohd-"+strings.ReplaceAll(id, "-", "")+"\n" {
		t.Fatalf("execute_bash_command?cid= = %d %s, want the command's output as uid 1000 on the conversation's hostname\n%s", r.Status, r.Body, tail(d.logs.String(), 20))
	}

	// The events are files in the conversation's own host directory,
	// owned by the repository owner.
	inner := openhands.DirsOf(filepath.Join(d.dirs.State, "inner"), id)
	ents, err := os.ReadDir(inner.BashEvents)
	if err != nil || len(ents) != 2 {
		t.Fatalf("%s holds %v (%v), want the command's 2 event files", inner.BashEvents, ents, err)
	}
	for _, e := range ents {
		st, err := os.Stat(filepath.Join(inner.BashEvents, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 {
			t.Errorf("%s is owned by uid %d, want 1000", e.Name(), sys.Uid)
		}
	}
	r = d.call("GET", "/api/bash/bash_events/search?kind__eq=BashCommand&cid="+id, nil)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"command":"while read`) {
		t.Errorf("bash_events/search?cid= = %d %s, want the command", r.Status, r.Body)
	}

	// The socket replays them from the same files.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/bash-events?resend_mode=all&cid="+id,
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Session-Api-Key": {d.apiKey()}}})
	if err != nil {
		t.Fatalf("dial /sockets/bash-events?cid=: %v", err)
	}
	defer c.CloseNow()
	_, first, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(first), `"BashCommand"`) {
		t.Errorf("first replayed event = %s (%v), want the BashCommand", first, err)
	}
	if got := bashOver(t, c, "echo again"); got != "again\n" {
		t.Errorf("a command on the socket printed %q, want again", got)
	}
}
