package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendCanvasWholeSession replays Agent Canvas's whole session through ohd
// with the stand-in as the conversations' image and as the upstream (the
// operator's own agent server), each step checked against what the real
// agent server answers (ref §2a, §7-§9; agent-canvas
// agent-server-conversation-service.api.ts): start-up calls, the default
// new conversation (a folder the server creates), a picked workspace,
// the events and session sockets, a message and run, the terminal, the
// git panel, files, a profile launch, a model switch, the VS Code tab,
// delete; and no credential reaches a container.
func TestBackendCanvasWholeSession(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		testenv.RequireRoot(t) // reading every process's environment; chown
		sec := newCanvasSecrets()
		prov := newFakeLLM(t)
		bin := buildStandin(t)
		upSettings, profileKeys, agentProfileID := profileEntries(prov.srv.URL)
		upSettings["llm"] = map[string]any{"model": "openai/gpt-fake", "api_key": sec.llmKey, "base_url": prov.srv.URL + "/v1"}
		upSettings["secrets"] = map[string]any{"GITHUB_TOKEN": map[string]any{"value": sec.saved, "description": "GitHub"}}
		up, home := upstreamServerHome(t, bin, sec.outerKey, sec.upstreamKey, upSettings)
		// The upstream's home belongs to the user (uid 1000): what ohd makes
		// under it must too.
		if err := os.Chown(home, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		keys := filepath.Join(testenv.TempDir(t), "keys")
		upKeyFile := filepath.Join(filepath.Dir(keys), "upstream-secret-key")
		testenv.WriteFile(t, keys, sec.outerKey+"\n")
		testenv.WriteFile(t, upKeyFile, sec.upstreamKey+"\n")
		if err := os.Chmod(keys, 0o600); err != nil {
			t.Fatal(err)
		}
		d := b.daemon(t, "--session-api-key-file", keys, "--upstream", up, "--upstream-secret-key-file", upKeyFile)
		origin := "http://localhost:3001" // Canvas's dev server
		call := func(method, path string, body any, hdr ...string) apiResponse {
			t.Helper()
			return d.call(method, path, body, append([]string{"X-Session-API-Key", sec.outerKey, "Origin", origin}, hdr...)...)
		}

		// 1. Start-up. The browser preflights every call (the key is a
		// custom header): answered without a key, for Canvas's origin.
		pre := d.call("OPTIONS", "/api/settings", nil, "X-Session-API-Key", "", "Origin", origin,
			"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-session-api-key")
		if pre.Status != 200 || pre.Header.Get("Access-Control-Allow-Origin") != origin || pre.Header.Get("Access-Control-Allow-Credentials") != "true" {
			t.Errorf("preflight = %d %v, want 200 allowing %s with credentials", pre.Status, pre.Header, origin)
		}
		// /server_info answers without a key (server_details_router.py L117).
		if r := d.call("GET", "/server_info", nil, "X-Session-API-Key", ""); r.Status != 200 {
			t.Errorf("GET /server_info without a key = %d %s, want 200", r.Status, r.Body)
		}
		// The 401 is the agent server's (dependencies.py L24-36).
		if r := d.call("GET", "/api/conversations/count", nil, "X-Session-API-Key", "wrong"); r.Status != 401 || strings.TrimSpace(string(r.Body)) != `{"detail":"Unauthorized"}` {
			t.Errorf("a wrong key = %d %s, want 401 {\"detail\":\"Unauthorized\"}", r.Status, r.Body)
		}
		for _, p := range []string{"/api/settings", "/api/profiles", "/api/settings/secrets", "/api/file/home"} {
			got, want := call("GET", p, nil), direct(t, up, "GET", p, sec.outerKey)
			if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) {
				t.Errorf("GET %s through ohd = %d %s, upstream = %d %s", p, got.Status, got.Body, want.Status, want.Body)
			}
			if got.Header.Get("Access-Control-Allow-Origin") != origin {
				t.Errorf("GET %s: Access-Control-Allow-Origin = %q, want %q", p, got.Header.Get("Access-Control-Allow-Origin"), origin)
			}
		}
		var fileHome struct{ Home string }
		call("GET", "/api/file/home", nil).json(t, &fileHome)
		var settings struct {
			AgentSettings map[string]any `json:"agent_settings"`
		}
		call("GET", "/api/settings", nil, "X-Expose-Secrets", "encrypted").json(t, &settings)
		token, _ := settings.AgentSettings["llm"].(map[string]any)["api_key"].(string)
		if !openhands.IsToken(token) {
			t.Fatalf("the encrypted settings carry no Fernet token: %v", settings.AgentSettings)
		}
		canvasBody := func(id, workingDir string, worktree bool) map[string]any {
			return map[string]any{
				"agent_settings":      settings.AgentSettings,
				"workspace":           map[string]any{"kind": "LocalWorkspace", "working_dir": workingDir},
				"client_tools":        []any{},
				"confirmation_policy": map[string]any{"kind": "NeverConfirm"},
				"max_iterations":      500, "stuck_detection": true, "autotitle": true,
				"worktree": worktree, "secrets_encrypted": true, "conversation_id": id,
				"secrets": map[string]any{"GITHUB_TOKEN": map[string]any{
					"kind": "LookupSecret", "url": "/api/settings/secrets/GITHUB_TOKEN", "description": "GitHub",
					"headers": map[string]any{"X-Session-API-Key": sec.outerKey},
				}},
			}
		}

		// 2. The default new conversation: <home>/workspace/project/<hex>
		// with worktree true. The real server creates the folder; an empty
		// new folder is no repository, so it starts without a worktree.
		hexName := strings.ReplaceAll(store.NewID(), "-", "")[:12]
		newDir := filepath.Join(fileHome.Home, "workspace", "project", hexName)
		newID := store.NewID()
		r := call("POST", "/api/conversations", canvasBody(newID, newDir, true))
		if r.Status != http.StatusCreated {
			t.Fatalf("default new conversation = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
		}
		if !strings.Contains(strings.Join(r.Header.Values("X-Ohd-Note"), "\n"), "not a git repository") {
			t.Errorf("the answer does not say the new folder started without a worktree: %v", r.Header.Values("X-Ohd-Note"))
		}
		for _, p := range []string{filepath.Join(fileHome.Home, "workspace"), filepath.Join(fileHome.Home, "workspace", "project"), newDir} {
			// The conversation's folder is lent to the agent's uid while the
			// conversation lives (issue 26: gitboundary.Borrow); it is still
			// the home owner's, which OwnerOf reads through the loan.
			uid, gid, err := gitboundary.OwnerOf(p)
			var st syscall.Stat_t
			if err == nil {
				err = syscall.Lstat(p, &st)
			}
			wantNow := uint32(1000)
			if p == newDir {
				wantNow = agentUID
			}
			if err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR || uid != 1000 || gid != 1000 || st.Uid != wantNow {
				t.Errorf("%s: %v owner %d:%d (uid %d now), want a directory of 1000:1000 (the home's owner), now of uid %d", p, err, uid, gid, st.Uid, wantNow)
			}
		}
		// Outside the allowed roots: a clear 400 naming the flag, nothing made.
		outside := filepath.Join(testenv.TempDir(t), "not", "allowed")
		if r := call("POST", "/api/conversations", canvasBody(store.NewID(), outside, true)); r.Status != 400 || !strings.Contains(string(r.Body), "--workspace-root") {
			t.Errorf("create outside the roots = %d %s, want 400 naming --workspace-root", r.Status, r.Body)
		}
		if _, err := os.Stat(filepath.Dir(outside)); !os.IsNotExist(err) {
			t.Errorf("a refused create made %s (%v)", filepath.Dir(outside), err)
		}

		// 3. A picked workspace: worktree false, as Canvas sends it.
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		pickedID := store.NewID()
		r = call("POST", "/api/conversations", canvasBody(pickedID, repo, false))
		if r.Status != http.StatusCreated {
			t.Fatalf("picked workspace = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
		}

		// /server_info now says the conversation image serves the scoped
		// runtime routes, so Canvas and the SDK call those.
		var info struct{ Capabilities []string }
		d.call("GET", "/server_info", nil, "X-Session-API-Key", "").json(t, &info)
		if strings.Join(info.Capabilities, ",") != "conversation_runtime_routes_v1" {
			t.Errorf("server_info capabilities = %v, want [conversation_runtime_routes_v1] (the stand-in image's)", info.Capabilities)
		}

		// 4. The sockets: events (key in the query, as a browser sends it)
		// and session, from Canvas's origin.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dial := func(path string) *websocket.Conn {
			t.Helper()
			c, _, err := websocket.Dial(ctx, "ws://"+d.listen+path, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}})
			if err != nil {
				t.Fatalf("dial %s: %v", path, err)
			}
			t.Cleanup(func() { c.CloseNow() })
			return c
		}
		events := dial("/sockets/events/" + pickedID + "?session_api_key=" + sec.outerKey)
		if _, hello, err := events.Read(ctx); err != nil || !bytes.Contains(hello, []byte("ConversationStateUpdateEvent")) {
			t.Fatalf("events socket first frame = %s, %v", hello, err)
		}
		session := dial("/sockets/session/" + pickedID + "?after_seq=-1&session_api_key=" + sec.outerKey)
		if _, sync, err := session.Read(ctx); err != nil || !bytes.Contains(sync, []byte(`"type":"sync"`)) {
			t.Fatalf("session socket first frame = %s, %v", sync, err)
		}
		// A foreign page's socket is refused before the upgrade.
		if _, resp, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/events/"+pickedID+"?session_api_key="+sec.outerKey,
			&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example.com"}}}); err == nil || resp == nil || resp.StatusCode != 403 {
			t.Errorf("socket from a foreign origin: err %v, response %v, want 403", err, resp)
		}

		// 5. A message, then run: both sockets see the message.
		msg := "hello from canvas " + hexName
		if r := call("POST", "/api/conversations/"+pickedID+"/events", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": msg}}, "run": true}); r.Status != 200 {
			t.Fatalf("send message = %d %s", r.Status, r.Body)
		}
		for name, c := range map[string]*websocket.Conn{"events": events, "session": session} {
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("%s socket: no message event: %v", name, err)
				}
				if bytes.Contains(b, []byte(msg)) {
					break
				}
			}
		}
		if r := call("POST", "/api/conversations/"+pickedID+"/run", nil); r.Status != 200 {
			t.Errorf("run = %d %s", r.Status, r.Body)
		}

		// 6. The terminal, on the scoped bash route: the command runs in the
		// container, in the conversation's folder.
		for _, c := range []struct{ id, dir string }{{newID, newDir}, {pickedID, repo}} {
			var out struct {
				Kind     string
				ExitCode *int `json:"exit_code"`
				Stdout   *string
			}
			r := call("POST", "/api/conversations/"+c.id+"/bash/execute_bash_command", map[string]any{"command": "echo canvas-terminal; pwd; echo x > .terminal-probe"})
			r.json(t, &out)
			if r.Status != 200 || out.Kind != "BashOutput" || out.ExitCode == nil || *out.ExitCode != 0 || out.Stdout == nil ||
				*out.Stdout != "canvas-terminal\n"+c.dir+"\n" {
				t.Errorf("terminal in %s = %d %s, want exit 0 and the folder", c.id, r.Status, r.Body)
			}
			// The command ran as the agent's own uid (issue 26: never the
			// folder's owner, whose git must not read what the agent wrote;
			// the file goes back to the owner when the conversation ends).
			if got, want := uidOf(t, filepath.Join(c.dir, ".terminal-probe")), fmt.Sprint(agentUID); got != want {
				t.Errorf("the terminal's file in %s belongs to uid %s, want the agent's %s", c.dir, got, want)
			}
		}
		// The deprecated global route with ?cid= reaches the same container.
		if r := call("POST", "/api/bash/execute_bash_command?cid="+pickedID, map[string]any{"command": "pwd", "cwd": repo}); r.Status != 200 || !strings.Contains(string(r.Body), repo) {
			t.Errorf("terminal with ?cid= = %d %s", r.Status, r.Body)
		}

		// 7. The git panel: a file the agent writes shows as a change, its
		// diff against HEAD.
		if r := call("POST", "/api/conversations/"+pickedID+"/bash/execute_bash_command", map[string]any{"command": "echo new > agent.txt && echo changed >> README.md"}); r.Status != 200 {
			t.Fatalf("write files = %d %s", r.Status, r.Body)
		}
		var changes []struct{ Status, Path string }
		call("GET", "/api/conversations/"+pickedID+"/git/changes?path="+repo, nil).json(t, &changes)
		got := map[string]string{}
		for _, c := range changes {
			got[c.Path] = c.Status
		}
		if got["agent.txt"] != "ADDED" || got["README.md"] != "UPDATED" {
			t.Errorf("git changes = %v, want agent.txt ADDED and README.md UPDATED", changes)
		}
		var diff struct{ Modified, Original *string }
		call("GET", "/api/conversations/"+pickedID+"/git/diff?path="+filepath.Join(repo, "README.md"), nil).json(t, &diff)
		if diff.Modified == nil || diff.Original == nil || !strings.HasSuffix(*diff.Modified, "changed\n") || strings.Contains(*diff.Original, "changed") {
			t.Errorf("git diff = %+v, want the file now and at HEAD", diff)
		}

		// 8. Files: upload, then download.
		content := "uploaded " + hexName
		var mp bytes.Buffer
		mw := multipart.NewWriter(&mp)
		fw, _ := mw.CreateFormFile("file", "up.txt")
		_, _ = io.WriteString(fw, content)
		_ = mw.Close()
		upPath := filepath.Join(newDir, "docs", "up.txt")
		if r := call("POST", "/api/conversations/"+newID+"/file/upload?path="+upPath, mp.Bytes(), "Content-Type", mw.FormDataContentType()); r.Status != 200 || strings.TrimSpace(string(r.Body)) != `{"success":true}` {
			t.Errorf("upload = %d %s", r.Status, r.Body)
		}
		if r := call("GET", "/api/conversations/"+newID+"/file/download?path="+upPath, nil); r.Status != 200 || string(r.Body) != content {
			t.Errorf("download = %d %q, want %q", r.Status, r.Body, content)
		}
		if b, err := os.ReadFile(upPath); err != nil || string(b) != content {
			t.Errorf("the uploaded file on the host = %q, %v", b, err)
		}

		// 9. A profile launch (agent_profile_id, title_llm_profile) in a
		// new folder: ohd resolves the upstream's profile; the inner server's
		// LLM call reaches the provider with the profile's key.
		profID := store.NewID()
		profDir := filepath.Join(fileHome.Home, "workspace", "project", hexName+"p")
		if r := call("POST", "/api/conversations", canvasProfileLaunch(profID, agentProfileID, profDir, "cheap")); r.Status != http.StatusCreated {
			t.Fatalf("profile launch = %d %s\n%s", r.Status, r.Body, tail(d.logs.String(), 30))
		}
		if got := llmKeyUsed(t, call, prov, profID); got != bearer(profileKeys["main"]) {
			t.Errorf("the profile launch's LLM call reached the provider as %q, want the profile's key", got)
		}

		// 10. The model picker in the picked workspace's conversation:
		// switch_llm with the profile read encrypted; the next call uses it.
		if r := canvasSwitchModel(t, call, pickedID, "other"); r.Status != 200 || strings.TrimSpace(string(r.Body)) != `{"success":true}` {
			t.Errorf("switch_llm = %d %s, want 200 {\"success\":true}", r.Status, r.Body)
		}
		if got := llmKeyUsed(t, call, prov, pickedID); got != bearer(profileKeys["other"]) {
			t.Errorf("after the model switch the provider got %q, want profile other's key", got)
		}

		// 11. The VS Code tab: the URL the inner server hands out is ohd's,
		// without the inner key, and its page answers through ohd.
		var vs struct{ URL string }
		vr := call("GET", "/api/vscode/url?cid="+pickedID, nil)
		vr.json(t, &vs)
		innerKey, _ := os.ReadFile(filepath.Join(d.record(pickedID).BrokerDir, "session-api-key"))
		if vr.Status != 200 || !strings.HasPrefix(vs.URL, "http://"+d.listen+"/ohd/conversations/"+pickedID+"/vscode/") ||
			len(bytes.TrimSpace(innerKey)) == 0 || strings.Contains(vs.URL, strings.TrimSpace(string(innerKey))) {
			t.Errorf("VS Code URL = %d %s, want ohd's URL for the conversation, without the inner key", vr.Status, vr.Body)
		} else if resp, err := http.Get(vs.URL); err != nil || resp.StatusCode != 200 {
			t.Errorf("opening the VS Code URL: %v %v, want 200", resp, err)
		} else {
			resp.Body.Close()
		}

		// 11b. The newer Canvas's calls (issue 28): the server's version it
		// checks, the scoped VS Code routes, "download conversation", a second
		// conversation on the picked folder, plan mode's child, and a global
		// git call without cid that names the folder.
		var si struct {
			Version    string `json:"version"`
			OhdVersion string `json:"ohd_version"`
		}
		d.call("GET", "/server_info", nil, "X-Session-API-Key", "").json(t, &si)
		if !openhands.AcceptedVersion(si.Version) || si.OhdVersion == "" {
			t.Errorf("server_info version %q ohd_version %q: want x.y.z >= %s (the newest Canvas refuses others) and ohd's own", si.Version, si.OhdVersion, openhands.MinClientVersion)
		}
		var scopedURL struct{ URL string }
		if r := call("GET", "/api/conversations/"+pickedID+"/vscode/url", nil); r.Status != 200 || json.Unmarshal(r.Body, &scopedURL) != nil || !strings.HasPrefix(scopedURL.URL, "http://"+d.listen+"/ohd/conversations/"+pickedID+"/vscode/") {
			t.Errorf("scoped vscode/url = %d %s, want JSON with ohd's editor URL", r.Status, r.Body)
		}
		if r := call("GET", "/api/conversations/"+pickedID+"/vscode/status", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"running":true`) {
			t.Errorf("scoped vscode/status = %d %s, want the server's JSON", r.Status, r.Body)
		}
		if r := call("GET", "/api/file/download-trajectory/"+pickedID, nil); r.Status != 200 || !bytes.HasPrefix(r.Body, []byte("PK")) {
			t.Errorf("download-trajectory = %d (%d bytes), want the conversation's zip", r.Status, len(r.Body))
		}
		secondID := store.NewID()
		if r := call("POST", "/api/conversations", canvasBody(secondID, repo, false)); r.Status != http.StatusCreated {
			t.Errorf("a second conversation on the picked folder = %d %s, want 201 as on the agent server", r.Status, r.Body)
		}
		planID := store.NewID()
		plan := canvasBody(planID, repo, false)
		plan["parent_conversation_id"] = pickedID
		if r := call("POST", "/api/conversations", plan); r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"parent_conversation_id":"`+pickedID+`"`) {
			t.Errorf("plan mode's child = %d %s, want 201 naming its parent", r.Status, r.Body)
		}
		var fam struct {
			Subs []string `json:"sub_conversation_ids"`
		}
		call("GET", "/api/conversations/"+pickedID, nil).json(t, &fam)
		if len(fam.Subs) != 1 || fam.Subs[0] != planID {
			t.Errorf("the parent's sub_conversation_ids = %v, want [%s]", fam.Subs, planID)
		}
		// "Branch from here" after the message (ref §10): a conversation of
		// its own, the picked one's events up to that one, its links.
		evs := eventIDs(t, call, pickedID)
		fr := call("POST", "/api/conversations/"+pickedID+"/fork", map[string]any{"from_event_id": evs[len(evs)-1], "title": "branch"})
		var forked struct {
			ID         string `json:"id"`
			ForkedFrom string `json:"forked_from_conversation_id"`
			Title      string `json:"title"`
		}
		fr.json(t, &forked)
		if fr.Status != http.StatusCreated || forked.ForkedFrom != pickedID || forked.Title != "branch" || forked.ID == pickedID {
			t.Errorf("branch from here = %d %s, want 201 with a new conversation forked from %s", fr.Status, fr.Body, pickedID)
		} else if got := eventIDs(t, call, forked.ID); !slices.Equal(got, evs) {
			t.Errorf("the fork's events = %v, want %v", got, evs)
		}
		if r := call("GET", "/api/git/changes?path="+url.QueryEscape(repo), nil); r.Status != 200 || !bytes.HasPrefix(bytes.TrimSpace(r.Body), []byte("[")) {
			t.Errorf("global git/changes without cid, with an upstream = %d %s, want the folder's conversation's answer", r.Status, r.Body)
		}
		if r := call("DELETE", "/api/conversations/"+secondID, nil); r.Status != 200 {
			t.Errorf("delete of the second conversation = %d %s", r.Status, r.Body)
		}

		// No credential reached either container.
		values := []secretValue{
			{"LLM key", []byte(sec.llmKey)}, {"saved secret", []byte(sec.saved)}, {"outer session key", []byte(sec.outerKey)},
			{"upstream's secret key", []byte(sec.upstreamKey)}, {"upstream's Fernet token", []byte(token)},
		}
		for n, k := range profileKeys {
			values = append(values, secretValue{"LLM key of profile " + n, []byte(k)})
		}
		for _, id := range []string{newID, pickedID, profID, forked.ID} {
			c := d.record(id)
			body := call("GET", "/api/conversations/"+id+"/standin/create_body", nil)
			inspected := []byte(b.workload(t, c.ContainerID).Raw)
			sinks := []sink{{"the create body the inner server received", body.Body}, {"the engine's record of the container", inspected}}
			sinks = append(sinks, containerEnvirons(t, c.ContainerID)...)
			sinks = append(sinks, filesUnder(t, c.BrokerDir)...)
			if l := leaks(values, sinks); len(l) > 0 {
				t.Errorf("conversation %s: %s", id, strings.Join(l, "; "))
			}
		}
		if l := leaks(values, append(filesUnder(t, d.dirs.State), sink{"ohd's log", []byte(d.logs.String())})); len(l) > 0 {
			t.Errorf("%s", strings.Join(l, "; "))
		}

		// The container dies mid-run (the agent was "running"): the answer
		// from the host files has every field of the live answer, and never a
		// live status — the agent server reports a stale RUNNING as ERROR
		// once it loads it (event_service.py L1140-1146).
		var live map[string]json.RawMessage
		lr := call("GET", "/api/conversations/"+pickedID, nil)
		lr.json(t, &live)
		if lr.Header.Get("X-Ohd-Source") != "inner" || string(live["execution_status"]) != `"running"` {
			t.Fatalf("live answer = %s (source %s), want the inner server's, running", lr.Body, lr.Header.Get("X-Ohd-Source"))
		}
		b.kill(t, d.record(pickedID).ContainerID)
		waitFor(t, 30*time.Second, "the record to become stopped", func() bool { return d.record(pickedID).State == store.StateStopped })
		var cold map[string]json.RawMessage
		cr := call("GET", "/api/conversations/"+pickedID, nil)
		cr.json(t, &cold)
		if cr.Header.Get("X-Ohd-Source") != "host" || string(cold["execution_status"]) != `"error"` {
			t.Errorf("answer without a container = %s (source %s), want from the host files, execution_status error", cr.Body, cr.Header.Get("X-Ohd-Source"))
		}
		for k, lv := range live {
			cv, ok := cold[k]
			switch {
			case !ok:
				t.Errorf("the answer without a container lacks the live answer's field %q", k)
			case k == "execution_status" || k == "updated_at": // the state's own
			case !jsonEqual(lv, cv):
				t.Errorf("the answer without a container has %s = %s, the live one %s", k, cv, lv)
			}
		}
		if r := call("GET", "/api/conversations/count?status=running", nil); strings.TrimSpace(string(r.Body)) != "0" {
			t.Errorf("count?status=running without a container = %s, want 0", r.Body)
		}

		// 12. Delete; a second delete is the agent server's 400; the id can
		// be used again, as on the real server.
		for _, id := range []string{newID, pickedID, profID, forked.ID} {
			if r := call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"success":true`) {
				t.Errorf("delete %s = %d %s", id, r.Status, r.Body)
			}
			if r := call("DELETE", "/api/conversations/"+id, nil); r.Status != 400 || strings.TrimSpace(string(r.Body)) != `{"detail":"Bad Request"}` {
				t.Errorf("second delete of %s = %d %s, want 400 {\"detail\":\"Bad Request\"}", id, r.Status, r.Body)
			}
		}
		if r := call("GET", "/api/conversations/"+planID, nil); r.Status != http.StatusNotFound {
			t.Errorf("plan mode's child after its parent's delete = %d, want 404 (deleted with it)", r.Status)
		}
		again := filepath.Join(fileHome.Home, "workspace", "project", hex.EncodeToString([]byte("again")))
		if r := call("POST", "/api/conversations", canvasBody(newID, again, true)); r.Status != http.StatusCreated {
			t.Errorf("re-create of the deleted id %s = %d %s, want 201 (the real server creates it)", newID, r.Status, r.Body)
		}
		if r := call("DELETE", "/api/conversations/"+newID, nil); r.Status != 200 {
			t.Errorf("delete of the re-created conversation = %d %s", r.Status, r.Body)
		}
	})
}

func uidOf(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(int(st.Uid))
}

// jsonEqual reports whether two JSON documents hold the same value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
