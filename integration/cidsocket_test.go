package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// bashOver runs command on the agent server's bash socket c and returns
// its stdout (reference §7: a BashCommand, then its BashOutput).
func bashOver(t *testing.T, c *websocket.Conn, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, _ := json.Marshal(map[string]any{"command": command, "cwd": "/"})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	cmdID := ""
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading bash events: %v", err)
		}
		var ev struct {
			Kind, ID, Command string
			CommandID         string  `json:"command_id"`
			Stdout            *string `json:"stdout"`
		}
		_ = json.Unmarshal(msg, &ev)
		switch {
		case ev.Kind == "BashCommand" && ev.Command == command && cmdID == "":
			cmdID = ev.ID
		case ev.Kind == "BashOutput" && ev.CommandID == cmdID && cmdID != "":
			if ev.Stdout == nil {
				return ""
			}
			return *ev.Stdout
		case ev.Kind == "BashError":
			t.Fatalf("bash socket: %s", msg)
		}
	}
}

// TestBackendBashSocketWithCIDReachesTheContainer: through ohd with an upstream,
// /sockets/bash-events?cid=ID runs its commands in conversation ID's
// container (where the broker socket is), and without cid on the
// upstream on the host; a malformed cid and an unknown conversation are
// refused.
func TestBackendBashSocketWithCIDReachesTheContainer(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		sec := newCanvasSecrets()
		bin := buildStandin(t)
		up := upstreamServer(t, bin, sec.outerKey, sec.upstreamKey, map[string]any{})
		keys := filepath.Join(testenv.TempDir(t), "keys")
		if err := os.WriteFile(keys, []byte(sec.outerKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d := b.daemon(t, "--session-api-key-file", keys, "--upstream", up)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}}, "X-Session-API-Key", sec.outerKey)
		if r.Status != http.StatusCreated {
			t.Fatalf("create = %d %s", r.Status, r.Body)
		}
		var info struct{ ID string }
		r.json(t, &info)

		dial := func(query string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, resp, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/bash-events?"+query, &websocket.DialOptions{HTTPHeader: hdr})
			if err == nil {
				t.Cleanup(func() { c.CloseNow() })
			}
			return c, resp, err
		}
		key := http.Header{"X-Session-Api-Key": {sec.outerKey}}
		where := `test -S /run/ohd/broker.sock && echo "container $OHD_CONVERSATION_ID" || echo host`

		c, resp, err := dial("cid="+info.ID, key)
		if err != nil {
			t.Fatalf("dial ?cid=: %v (%v)\n%s", err, resp, tail(d.logs.String(), 20))
		}
		if got := bashOver(t, c, where); got != "container "+info.ID+"\n" {
			t.Errorf("a command on /sockets/bash-events?cid= ran on %q, want conversation %s's container", got, info.ID)
		}
		plain, resp, err := dial("resend_mode=all", key)
		if err != nil {
			t.Fatalf("dial without cid: %v (%v)", err, resp)
		}
		if got := bashOver(t, plain, where); got != "host\n" {
			t.Errorf("a command on /sockets/bash-events without cid ran on %q, want the upstream on the host", got)
		}

		if _, resp, err := dial("cid=nope", key); err == nil || resp == nil || resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("malformed cid: %v (%v), want 422", err, resp)
		}
		unknown, _, err := dial("cid="+store.NewID(), key)
		if err != nil {
			t.Fatalf("unknown conversation: %v, want an upgrade and then 4004", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, _, err := unknown.Read(ctx); websocket.CloseStatus(err) != 4004 {
			t.Errorf("unknown conversation: %v, want close 4004", err)
		}
	})
}
