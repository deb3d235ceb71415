package integration

import (
	"context"
	"fmt"
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

// TestBackendInnerBashEvents: the terminal routes of a conversation work for the
// agent's own uid (agentUID, which the container runs as since issue 26). The agent server writes its bash events to the
// relative workspace/bash_events, i.e. /workspace/bash_events in its
// image, which belongs to uid 10001 (the test image has the same
// layout); the stand-in fails there as the real server does (500), so
// this test fails if ohd stops setting OH_BASH_EVENTS_DIR to the
// conversation's host directory (openhands.Env, paths.go).
func TestBackendInnerBashEvents(t *testing.T) {
	eachBackend(t, innerBashEvents)
}

func innerBashEvents(t *testing.T, b backend) {
	// The test image has a shell and no coreutils: the uid and hostname
	// read with builtins.
	const whoAndWhere = `while read k v rest; do [ "$k" = Uid: ] && echo $v; done < /proc/self/status; read h < /proc/sys/kernel/hostname; echo $h`
	testenv.RequireRoot(t)
	d := b.daemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
	id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})

	r := d.call("POST", "/api/bash/execute_bash_command?cid="+id, map[string]any{"command": whoAndWhere, "cwd": "/"})
	var out struct {
		Kind     string `json:"kind"`
		Stdout   string `json:"stdout"`
		ExitCode *int   `json:"exit_code"`
	}
	r.json(t, &out)
	if r.Status != http.StatusOK || out.Kind != "BashOutput" || out.ExitCode == nil || *out.ExitCode != 0 || out.Stdout != fmt.Sprintf("%d\nohd-%s\n", agentUID, strings.ReplaceAll(id, "-", "")) {
		t.Fatalf("execute_bash_command?cid= = %d %s, want the command's output as the agent's uid %d on the conversation's hostname\n%s", r.Status, r.Body, agentUID, tail(d.logs.String(), 20))
	}

	// The events are files in the conversation's own host directory,
	// owned by the agent's uid.
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
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != agentUID {
			t.Errorf("%s is owned by uid %d, want the agent's %d", e.Name(), sys.Uid, agentUID)
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

// TestBackendInnerLeaseAcrossContainerLoss: after the inner server is killed
// (its container started again) and after a removal behind ohd's back
// (docker rm -f; a pod deleted: a new container),
// the next request is served at once, events and socket included, on the
// same hostname. The stand-in holds the agent server's conversation lease
// (owner_lease.json: hostname, pid, 45 s): a new hostname, or the same pid
// on the same hostname, would keep the conversation 404 and its socket
// 4004 for 45 s unless ohd turns the lease off (openhands.LeaseTTLEnv).
func TestBackendInnerLeaseAcrossContainerLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		d := b.daemon(t)
		defer func() {
			if t.Failed() {
				t.Logf("ohd's log:\n%s", tail(grepLines(d.logs.String(), "level\":\"INFO", "level\":\"WARN", "level\":\"ERROR"), 40))
			}
		}()
		repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}})
		if r := d.call("POST", "/api/conversations/"+id+"/events", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "still here"}}}); r.Status != 200 {
			t.Fatalf("POST events = %d %s", r.Status, r.Body)
		}
		hostname := b.workload(t, d.record(id).ContainerID).Hostname
		for _, loss := range []struct {
			name string
			do   func(testing.TB, string)
		}{
			{"a crash of the inner server", b.crash},
			{"a removal behind ohd's back", b.kill},
		} {
			loss.do(t, d.record(id).ContainerID)
			start := time.Now()
			r := d.call("GET", "/api/conversations/"+id+"/events/search", nil)
			if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "still here") {
				t.Fatalf("after %s: events = %d %s, want the message at once", loss.name, r.Status, r.Body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			c, _, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/events/"+id+"",
				&websocket.DialOptions{HTTPHeader: http.Header{"X-Session-Api-Key": {d.apiKey()}}})
			if err != nil {
				cancel()
				t.Fatalf("after %s: dial the events socket: %v", loss.name, err)
			}
			// The conversation's state first (a held lease closes 4004).
			_, msg, err := c.Read(ctx)
			c.CloseNow()
			cancel()
			if err != nil || !strings.Contains(string(msg), `"ConversationStateUpdateEvent"`) || !strings.Contains(string(msg), id) {
				t.Errorf("after %s: the events socket gave %s (%v), want the conversation's state", loss.name, msg, err)
			}
			if h := b.workload(t, d.record(id).ContainerID).Hostname; h != hostname {
				t.Errorf("after %s: hostname %v, want %v", loss.name, h, hostname)
			}
			t.Logf("after %s: served again in %s", loss.name, time.Since(start).Round(time.Millisecond))
		}
	})
}
