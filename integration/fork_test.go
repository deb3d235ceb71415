package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendForkBranchFromHere: Canvas's "branch from here" (POST
// /api/conversations/{id}/fork {"from_event_id", "title"}, ref §10;
// issue 28, acceptance 6) through ohd, with the stand-in forking as the
// agent server does. The fork is a conversation of its own: its own
// container, its own worktree on its own branch starting at the source's
// published commit, the source's events up to from_event_id and none
// after, the answer the agent server's ConversationInfo with the fork's
// links; the source's mediated LLM key and secret reach the fork's inner
// server through the fork's own broker, under its own names, and are
// never in clear in anything the container or ohd's files hold. The
// source is untouched and no longer holds the fork; the two are deleted
// independently.
func TestBackendForkBranchFromHere(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t)
		sec := newCanvasSecrets()
		prov := newFakeLLM(t)
		d := b.daemon(t)
		static := "fork-static-VALUE-" + store.NewID()
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		srcID, _ := d.apiCreate(map[string]any{
			"agent": map[string]any{"kind": "Agent", "llm": map[string]any{
				"model": "anthropic/claude-fake", "api_key": sec.llmKey, "base_url": prov.srv.URL, "usage_id": "agent",
			}},
			"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo},
			"worktree":  true, "max_iterations": 50, "tags": map[string]any{},
			"secrets": map[string]any{"DB_PASSWORD": map[string]any{"kind": "StaticSecret", "value": static}},
		})
		src := d.record(srcID)
		if src.Worktree == "" {
			t.Fatalf("the source has no worktree: %+v", src)
		}
		// Two messages: the fork branches after the first.
		for _, m := range []string{"first message", "second message"} {
			if r := d.call("POST", "/api/conversations/"+srcID+"/events", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": m}}}); r.Status != 200 {
				t.Fatalf("send %q = %d %s", m, r.Status, r.Body)
			}
		}
		srcEvents := eventIDs(t, d.call, srcID)
		if len(srcEvents) < 2 {
			t.Fatalf("the source has events %v, want two messages", srcEvents)
		}
		branchAt := srcEvents[len(srcEvents)-2]
		// The agent commits; the fork starts at what ohd published of it.
		d.inside(src, "echo agent > agent.txt && git add agent.txt && git -c user.name=a -c user.email=a@x commit -q -m agent")
		tip := d.inside(src, "git rev-parse HEAD")
		waitFor(t, 30*time.Second, "the source's commit published", func() bool { return d.record(srcID).Published == tip })

		// Refusals, as the agent server answers them; nothing is made.
		before := len(d.call("GET", "/api/conversations/search", nil).Body)
		if r := d.call("POST", "/api/conversations/"+srcID+"/fork", map[string]any{"from_event_id": "no-such-event"}); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "from_event_id") {
			t.Errorf("fork from an unknown event = %d %s, want 404 naming from_event_id", r.Status, r.Body)
		}
		if r := d.call("POST", "/api/conversations/"+srcID+"/fork", map[string]any{"id": srcID}); r.Status != http.StatusConflict {
			t.Errorf("fork onto an existing id = %d %s, want 409", r.Status, r.Body)
		}
		if r := d.call("POST", "/api/conversations/"+store.NewID()+"/fork", map[string]any{}); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "Source conversation not found") {
			t.Errorf("fork of an unknown conversation = %d %s, want 404 Source conversation not found", r.Status, r.Body)
		}
		if r := d.call("POST", "/api/conversations/"+srcID+"/fork", map[string]any{"title": strings.Repeat("x", 201)}); r.Status != http.StatusUnprocessableEntity {
			t.Errorf("fork with a title of 201 characters = %d %s, want 422", r.Status, r.Body)
		}
		if after := len(d.call("GET", "/api/conversations/search", nil).Body); after != before {
			t.Errorf("a refused fork changed the conversation list")
		}

		// The fork.
		r := d.call("POST", "/api/conversations/"+srcID+"/fork", map[string]any{"from_event_id": branchAt, "title": "branch from here"})
		if r.Status != http.StatusCreated {
			t.Fatalf("fork = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
		}
		var info map[string]json.RawMessage
		r.json(t, &info)
		var forkID string
		_ = json.Unmarshal(info["id"], &forkID)
		fork := d.record(forkID)
		if fork.State != store.StateRunning || r.Header.Get("X-Ohd-Source") != "inner" {
			t.Fatalf("fork %s is %s (answer from %q), want running and answered by its own server", forkID, fork.State, r.Header.Get("X-Ohd-Source"))
		}
		want := map[string]string{
			"forked_from_conversation_id": `"` + srcID + `"`, "forked_from_event_id": `"` + branchAt + `"`,
			"title": `"branch from here"`, "execution_status": `"idle"`,
		}
		for k, v := range want {
			if string(info[k]) != v {
				t.Errorf("fork answer %s = %s, want %s", k, info[k], v)
			}
		}
		var ws struct {
			WorkingDir string `json:"working_dir"`
		}
		_ = json.Unmarshal(info["workspace"], &ws)
		if ws.WorkingDir != fork.WorkingDir || fork.WorkingDir == src.WorkingDir {
			t.Errorf("fork working_dir = %q, record %q, source %q: want the fork's own worktree", ws.WorkingDir, fork.WorkingDir, src.WorkingDir)
		}
		// The agent server's ConversationInfo: every field the source's
		// answer has.
		var srcInfo map[string]json.RawMessage
		d.call("GET", "/api/conversations/"+srcID, nil).json(t, &srcInfo)
		for k := range srcInfo {
			if _, ok := info[k]; !ok {
				t.Errorf("the fork's answer lacks %q, which the source's has", k)
			}
		}
		// Its own container, worktree and branch, from the published commit.
		if fork.ContainerID == "" || fork.ContainerID == src.ContainerID || fork.Worktree == "" || fork.Worktree == src.Worktree ||
			fork.Branch == src.Branch || fork.StartCommit != tip || fork.BrokerDir == src.BrokerDir {
			t.Errorf("fork container %s worktree %s branch %s start %s broker %s; source %s %s %s published %s %s: want its own, from the published commit",
				fork.ContainerID, fork.Worktree, fork.Branch, fork.StartCommit, fork.BrokerDir, src.ContainerID, src.Worktree, src.Branch, tip, src.BrokerDir)
		}
		if got := d.inside(fork, "git rev-parse HEAD && git status --porcelain && git show HEAD:agent.txt"); got != tip+"\nagent" {
			t.Errorf("the fork's worktree: %q, want the source's committed work at %s", got, tip)
		}
		// The events up to from_event_id, none after.
		forkEvents := eventIDs(t, d.call, forkID)
		if wantEv := srcEvents[:slices.Index(srcEvents, branchAt)+1]; !slices.Equal(forkEvents, wantEv) {
			t.Errorf("fork events = %v, want %v (the source's up to %s)", forkEvents, wantEv, branchAt)
		}
		if got := eventIDs(t, d.call, srcID); !slices.Equal(got, srcEvents) {
			t.Errorf("the source's events after the fork = %v, want %v", got, srcEvents)
		}
		// The source's server no longer holds the fork.
		if _, err := os.Stat(filepath.Join(d.dirs.State, "inner", srcID, "conversations", strings.ReplaceAll(forkID, "-", ""))); !os.IsNotExist(err) {
			t.Errorf("the source's inner state still holds the fork: %v", err)
		}
		// The source's credentials, the fork's own: the LLM call reaches the
		// provider with the key, the secret resolves, through the fork's
		// broker under its names.
		n := len(prov.calls())
		if r := d.call("POST", "/api/conversations/"+forkID+"/standin/llm", map[string]any{"prompt": "hi"}); r.Status != 200 {
			t.Fatalf("the fork's LLM call = %d %s", r.Status, r.Body)
		}
		if calls := prov.calls(); len(calls) != n+1 || calls[n] != "/v1/messages authorization= x-api-key="+sec.llmKey {
			t.Errorf("provider calls = %q, want the fork's call with the source's key", calls)
		}
		if r := d.call("GET", "/api/conversations/"+forkID+"/standin/secret/DB_PASSWORD", nil); r.Status != 200 || string(r.Body) != static {
			t.Errorf("the fork's secret = %d %q, want its value", r.Status, r.Body)
		}
		var body struct {
			Agent json.RawMessage `json:"agent"`
		}
		raw, err := os.ReadFile(filepath.Join(d.dirs.State, "inner", forkID, "conversations", strings.ReplaceAll(forkID, "-", ""), openhands.BaseStateFile))
		if err != nil || json.Unmarshal(raw, &body) != nil || !strings.Contains(string(body.Agent), "/llm/"+forkID+".") || strings.Contains(string(raw), srcID+".") {
			t.Errorf("the fork's base_state.json (%v): its LLM must be the fork's own relay profile and name none of the source's: %s", err, raw)
		}
		if out := d.ohctl("secret", "ls"); !strings.Contains(out, forkID+".") {
			t.Errorf("ohctl secret ls lists no credential of the fork:\n%s", out)
		}
		// Never in clear where the container or ohd's files could show it.
		sinks := append([]sink{}, containerEnvirons(t, fork.ContainerID)...)
		for _, s := range filesUnder(t, d.dirs.State) {
			if filepath.Base(s.name) != "session-api-key" {
				sinks = append(sinks, s)
			}
		}
		sinks = append(sinks, sink{"ohd's log", []byte(d.logs.String())})
		if l := leaks([]secretValue{{"LLM key", []byte(sec.llmKey)}, {"static secret", []byte(static)}}, sinks); len(l) > 0 {
			t.Errorf("leaks:\n  %s", strings.Join(l, "\n  "))
		}

		// A conversation in place on a folder (Canvas's picked folder,
		// worktree false), stopped, forks in place on the same folder, as the
		// agent server's fork shares its source's workspace; whole, without
		// from_event_id.
		picked := testenv.NewRepo(t, testenv.RepoOptions{})
		inID, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": picked}, "worktree": false})
		if r := d.call("POST", "/api/conversations/"+inID+"/events", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "in place"}}}); r.Status != 200 {
			t.Fatalf("send = %d %s", r.Status, r.Body)
		}
		// Stopped, as Canvas finds a finished conversation the idle timer
		// stopped: the fork starts it again to fork it.
		b.stop(t, d.record(inID).ContainerID)
		waitFor(t, 30*time.Second, "the in-place source stopped", func() bool { return d.record(inID).State == store.StateStopped })
		r = d.call("POST", "/api/conversations/"+inID+"/fork", nil)
		if r.Status != http.StatusCreated {
			t.Fatalf("fork in place = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
		}
		var inInfo struct {
			ID         string  `json:"id"`
			ForkedFrom string  `json:"forked_from_conversation_id"`
			FromEvent  *string `json:"forked_from_event_id"`
		}
		r.json(t, &inInfo)
		inSrc, inFork := d.record(inID), d.record(inInfo.ID)
		if inFork.WorkingDir != picked || !inFork.InPlace || inFork.ContainerID == inSrc.ContainerID || inInfo.ForkedFrom != inID || inInfo.FromEvent != nil {
			t.Errorf("in-place fork: working dir %s in place %v container %s (source's %s), answer %+v; want in place on %s in its own container",
				inFork.WorkingDir, inFork.InPlace, inFork.ContainerID, inSrc.ContainerID, inInfo, picked)
		}
		if got, want := eventIDs(t, d.call, inInfo.ID), eventIDs(t, d.call, inID); !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("in-place fork events = %v, want all the source's %v", got, want)
		}

		// Independent: deleting the source leaves the fork working; the
		// fork's delete removes its own credentials.
		if r := d.call("DELETE", "/api/conversations/"+srcID, nil); r.Status != 200 {
			t.Fatalf("delete source = %d %s", r.Status, r.Body)
		}
		if r := d.call("GET", "/api/conversations/"+forkID+"/standin/secret/DB_PASSWORD", nil); r.Status != 200 || string(r.Body) != static {
			t.Errorf("the fork's secret after the source's delete = %d %q", r.Status, r.Body)
		}
		if r := d.call("DELETE", "/api/conversations/"+forkID, nil); r.Status != 200 {
			t.Fatalf("delete fork = %d %s", r.Status, r.Body)
		}
		if out := d.ohctl("secret", "ls"); strings.Contains(out, forkID) || strings.Contains(out, srcID) {
			t.Errorf("ohctl secret ls after both ended still lists their credentials:\n%s", out)
		}
	})
}

// eventIDs returns the ids of a conversation's events, oldest first.
func eventIDs(t *testing.T, call caller, id string) []string {
	t.Helper()
	var page struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	r := call("GET", "/api/conversations/"+id+"/events/search", nil)
	if r.Status != 200 {
		t.Fatalf("events of %s = %d %s", id, r.Status, r.Body)
	}
	r.json(t, &page)
	var out []string
	for _, e := range page.Items {
		out = append(out, e.ID)
	}
	return out
}

// TestBackendForkInterruptedIsForgottenAtStart: ohd killed after the source's
// server wrote a fork and before ohd moved it leaves that fork with the
// source's server (on disk, and loaded by it); the next start has the
// server forget it, and the source's own conversation stays.
func TestBackendForkInterruptedIsForgottenAtStart(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, func(t *testing.T, b backend) {
		dirs := newDirs(t)
		d := b.start(t, daemonOptions{Failpoints: true, Dirs: &dirs})
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		srcID, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"kind": "LocalWorkspace", "working_dir": repo}, "worktree": true})
		if r := d.call("POST", "/api/conversations/"+srcID+"/events", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hello"}}}); r.Status != 200 {
			t.Fatalf("send = %d %s", r.Status, r.Body)
		}
		forkID := store.NewID()
		left := filepath.Join(dirs.State, "inner", srcID, "conversations", strings.ReplaceAll(forkID, "-", ""))

		d.stop()
		d.opts.Env = []string{"OHD_FAILPOINTS=fork/after-inner"}
		d.start()
		if r, err := d.callErr("POST", "/api/conversations/"+srcID+"/fork", map[string]any{"id": forkID}); err == nil {
			t.Errorf("the fork answered %d %s through the kill", r.Status, r.Body)
		}
		if !d.waitExit(120e9) {
			t.Fatalf("ohd did not die at fork/after-inner: %v\n%s", d.err, tail(d.logs.String(), 20))
		}
		// The control: the kill left the fork with the source's server.
		if _, err := os.Stat(left); err != nil {
			t.Fatalf("the interrupted fork left nothing with the source's server (%v): the test shows nothing", err)
		}
		d.opts.Env = nil
		d.start()
		waitFor(t, 60*time.Second, "the source's server forgot the interrupted fork", func() bool {
			_, err := os.Stat(left)
			return os.IsNotExist(err)
		})
		if _, err := os.Stat(filepath.Join(dirs.State, "inner", srcID, "conversations", strings.ReplaceAll(srcID, "-", ""))); err != nil {
			t.Errorf("the source's own conversation is gone: %v", err)
		}
		if r := d.call("GET", "/api/conversations/"+forkID, nil); r.Status != http.StatusNotFound {
			t.Errorf("GET the interrupted fork = %d, want 404 (it was never made)", r.Status)
		}
		if r := d.call("GET", "/api/conversations/"+srcID+"/events/search", nil); r.Status != 200 || !strings.Contains(string(r.Body), "hello") {
			t.Errorf("the source's events after the sweep = %d %s", r.Status, r.Body)
		}
	})
}
