package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// sink is a place a value must never show up in, with its content.
type sink struct {
	name    string
	content []byte
}

// secretValue is a value that must stay where it belongs.
type secretValue struct {
	what  string
	value []byte
}

// leaks reports every (value, sink) pair where the value appears.
func leaks(values []secretValue, sinks []sink) []string {
	var out []string
	for _, v := range values {
		for _, s := range sinks {
			if bytes.Contains(s.content, v.value) {
				out = append(out, fmt.Sprintf("the %s appears in %s", v.what, s.name))
			}
		}
	}
	return out
}

// processEnvirons returns the environment of every process on the
// machine, by pid, with the command line of each (best effort: processes
// come and go while we read).
func processEnvirons(t testing.TB) map[int][2][]byte {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][2][]byte{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out[pid] = [2][]byte{env, cmdline}
	}
	return out
}

// TestBackendSecretHygiene runs a full credential scenario — a secret read
// through the broker, git credentials used by real git inside the
// container, an LLM call through the broker's injection proxy, OAuth
// tokens refreshed on the host, and a batch of refused requests — and then
// looks for every secret value, token and key in ohd's logs, the audit,
// every error body, the engine's record of every container, and the
// environment of every process on the machine.
func TestBackendSecretHygiene(t *testing.T) {
	testenv.RequireRoot(t) // reading every process's environment
	nonce := store.NewID()
	val := func(what string) []byte { return []byte(what + "-VALUE-" + strings.ReplaceAll(store.NewID(), "-", "")) }
	secretAPI, gitToken, llmKey, clientSecret := val("secret"), val("gittoken"), val("llmkey"), val("clientsecret")
	refresh1, refresh2, refreshBad, access1 := val("refresh1"), val("refresh2"), val("refreshbad"), val("access1")

	// A fake LLM provider: checks the injected key, and answers with it
	// (the broker must mask it), also in an error.
	var provMu sync.Mutex
	var provSawKey, provCalls int
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		provMu.Lock()
		provCalls++
		if r.Header.Get("Authorization") == "Bearer "+string(llmKey) {
			provSawKey++
		}
		provMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":"provider failed for key %s"}`, llmKey)
			return
		}
		fmt.Fprintf(w, `{"choices":[{"text":"hello"}],"echo_auth":%q}`, r.Header.Get("Authorization"))
	}))
	t.Cleanup(provider.Close)
	// A fake OAuth token endpoint: rotates the refresh token; the "bad"
	// server refuses, quoting what it was sent.
	var oauthMu sync.Mutex
	var oauthGood, oauthBad int
	tokenEndpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		oauthMu.Lock()
		defer oauthMu.Unlock()
		if r.URL.Path == "/token" && r.PostForm.Get("refresh_token") == string(refresh1) && r.PostForm.Get("client_secret") == string(clientSecret) {
			oauthGood++
			fmt.Fprintf(w, `{"access_token":%q,"refresh_token":%q,"expires_in":3600,"token_type":"Bearer"}`, access1, refresh2)
			return
		}
		oauthBad++
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"refresh token %s with client secret %s"}`, r.PostForm.Get("refresh_token"), r.PostForm.Get("client_secret"))
	}))
	t.Cleanup(tokenEndpoint.Close)

	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		var errorBodies []sink
		keep := func(what string, b []byte) { errorBodies = append(errorBodies, sink{"error body of " + what, b}) }

		for name, v := range map[string][]byte{"api": secretAPI, "gittoken": gitToken, "llmkey": llmKey, "oauth-client": clientSecret} {
			if _, err := d.ohctlIn(string(v), "secret", "set", name); err != nil {
				t.Fatal(err)
			}
		}
		d.ohctl("git-host", "set", "git.example.com", "--secret", "gittoken")
		d.ohctl("llm", "set", "prov", "--base-url", provider.URL+"/v1", "--key-secret", "llmkey", "--model", "m")
		if _, err := d.ohctlIn(string(refresh1), "oauth", "set", "gh", "--token-url", tokenEndpoint.URL+"/token", "--client-id", "cid", "--client-secret", "oauth-client", "--refresh-token-stdin"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ohctlIn(string(refreshBad), "oauth", "set", "gh-bad", "--token-url", tokenEndpoint.URL+"/bad", "--client-id", "cid", "--client-secret", "oauth-client", "--refresh-token-stdin"); err != nil {
			t.Fatal(err)
		}

		api := newAPIClient(d, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		id, err := api.create(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range [][2]string{{"secret", "api"}, {"git", "git.example.com"}, {"llm", "prov"}, {"oauth", "gh"}, {"oauth", "gh-bad"}} {
			d.ohctl("grant", id, g[0], g[1])
		}
		// The credential-helper route hands the token to git; the relay's
		// route (the default) is TestGitRelayInsideAContainer's.
		d.ohctl("grant", id, "git", "git.example.com", "--git-relay=false")
		c := d.record(id)
		cl := newBrokerClient(c)
		defer cl.Close()

		// A secret through the broker.
		if got, err := cl.Secret(ctx, "api"); err != nil || !bytes.Equal(got, secretAPI) {
			t.Fatalf("broker secret api = %q, %v", got, err)
		}
		// Git credentials, used by real git in the container: credential.helper
		// comes from ohd's GIT_CONFIG_* environment.
		code, out := d.execIn(id, "sh", "-c", "printf 'protocol=https\\nhost=git.example.com\\n\\n' | git credential fill")
		if code != 0 || !strings.Contains(out, "password="+string(gitToken)) || !strings.Contains(out, "username=x-access-token") {
			t.Fatalf("git credential fill in the container = %d %q", code, out)
		}
		// The LLM provider through the broker's injection proxy.
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://ohd-broker/v1/llm/prov/proxy/chat/completions", strings.NewReader(`{"model":"m","prompt":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		llmAnswer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(llmAnswer, []byte("hello")) {
			t.Fatalf("LLM proxy = %d %s", resp.StatusCode, llmAnswer)
		}
		provMu.Lock()
		if provSawKey != 1 {
			t.Errorf("the provider saw the injected key %d times, want 1", provSawKey)
		}
		provMu.Unlock()
		errorBodies = append(errorBodies, sink{"the LLM proxy's answer", llmAnswer})
		req, _ = http.NewRequestWithContext(ctx, "GET", "http://ohd-broker/v1/llm/prov/proxy/fail", nil)
		if resp, err = cl.Do(req); err != nil {
			t.Fatal(err)
		}
		failure, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 500 {
			t.Errorf("LLM provider failure = %d %s, want its 500 passed on", resp.StatusCode, failure)
		}
		keep("the LLM provider's failure", failure)
		// OAuth: refreshed on the host, twice asked, once refreshed.
		for range 2 {
			tok, err := cl.OAuthToken(ctx, "gh")
			if err != nil || tok.AccessToken != string(access1) {
				t.Fatalf("oauth token = %+v, %v", tok, err)
			}
		}
		oauthMu.Lock()
		if oauthGood != 1 {
			t.Errorf("the token endpoint refreshed %d times, want 1", oauthGood)
		}
		oauthMu.Unlock()

		// Refused requests; every answer is kept.
		brk := unixHTTP(filepath.Join(c.BrokerDir, "broker.sock"))
		token, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
		auth := []string{"Authorization", "Bearer " + strings.TrimSpace(string(token)), "X-OHD-Request", "1"}
		for _, rq := range []struct{ method, path, body string }{
			{"GET", "/v1/oauth/gh-bad/token", ""},
			{"GET", "/v1/llm/prov", ""},
			{"GET", "/v1/secrets/gittoken", ""},
			{"POST", "/v1/git-credential?action=get", "protocol=https\nhost=" + string(secretAPI) + "\x00\n\n"},
			{"POST", "/v1/git-credential?action=get", "protocol=https\nhost=other.example.com\npassword=" + string(gitToken) + "\n\n"},
			{"POST", "/v1/git-credential?action=get", "protocol=https\nhost=git.example.com\nusername=" + string(secretAPI) + "\rx\n\n"},
		} {
			r, err := rawCall(brk, "http://ohd-broker", rq.method, rq.path, []byte(rq.body), auth...)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status < 400 {
				t.Errorf("broker %s %s = %d, want a refusal", rq.method, rq.path, r.Status)
			}
			keep("broker "+rq.method+" "+rq.path, r.Body)
		}
		r, _ := rawCall(brk, "http://ohd-broker", "GET", "/v1/whoami", nil, "Authorization", "Bearer "+string(secretAPI), "X-OHD-Request", "1")
		keep("broker with a secret as token", r.Body)
		// Token rotation: the old token is refused, the new one works.
		d.ohctl("token", "rotate", id)
		newToken, _ := os.ReadFile(filepath.Join(c.BrokerDir, "token"))
		r, _ = rawCall(brk, "http://ohd-broker", "GET", "/v1/whoami", nil, auth...)
		if r.Status != 401 {
			t.Errorf("old token after rotate = %d", r.Status)
		}
		keep("broker with the old token", r.Body)
		if _, err := cl.Whoami(ctx); err != nil {
			t.Errorf("whoami with the rotated token: %v", err)
		}
		// The conversation API and the control socket refuse too.
		for _, hdr := range [][]string{{"X-Session-API-Key", d.apiKey() + "x"}, {"X-Session-API-Key", string(secretAPI)}, {"X-Expose-Secrets", "1"}} {
			r, err := api.do(ctx, "GET", "/api/conversations/"+id+"/echo/x", nil, hdr...)
			if err != nil || r.Status < 400 {
				t.Errorf("conversation API with %s = %v %d", hdr[0], err, r.Status)
			}
			keep("conversation API with "+hdr[0], r.Body)
		}
		for _, args := range [][]string{{"secret", "set", "bad/name"}, {"secret", "set", "empty-" + nonce[:8]}} {
			stdin := string(secretAPI)
			if strings.HasPrefix(args[2], "empty") {
				stdin = ""
			}
			_, err := d.ohctlIn(stdin, args...)
			var oe *ohctlError
			if !errors.As(err, &oe) {
				t.Errorf("ohctl %v succeeded", args)
				continue
			}
			keep("ohctl "+strings.Join(args, " "), []byte(oe.stderr))
		}

		// Where the values belong: sanity checks that they are real and that
		// the search finds them.
		innerKey, _ := os.ReadFile(filepath.Join(c.BrokerDir, "session-api-key"))
		masterHex, _ := os.ReadFile(filepath.Join(d.dirs.State, "master.key"))
		masterRaw, err := hex.DecodeString(strings.TrimSpace(string(masterHex)))
		if err != nil || len(masterRaw) < 32 {
			t.Fatalf("master key file: %v (%d bytes)", err, len(masterRaw))
		}
		values := []secretValue{
			{"secret value", secretAPI}, {"git token", gitToken}, {"LLM API key", llmKey}, {"OAuth client secret", clientSecret},
			{"refresh token", refresh1}, {"rotated refresh token", refresh2}, {"refused refresh token", refreshBad}, {"access token", access1},
			{"broker token", bytes.TrimSpace(token)}, {"rotated broker token", bytes.TrimSpace(newToken)},
			{"inner session key", bytes.TrimSpace(innerKey)}, {"outer API key", []byte(d.apiKey())},
			{"master key (hex)", bytes.TrimSpace(masterHex)}, {"master key (raw)", masterRaw},
		}
		for _, v := range values {
			if len(v.value) < 16 {
				t.Fatalf("the %s is too short to search for: %q", v.what, v.value)
			}
		}
		if got := leaks(values, []sink{{"git credential fill's output", []byte(out)}}); len(got) != 1 {
			t.Fatalf("the search does not find the git token where it must be: %v", got)
		}

		// The sinks.
		sinks := append([]sink{}, errorBodies...)
		sinks = append(sinks, sink{"ohd's log", []byte(d.logs.String())})
		sinks = append(sinks, sink{"the audit", []byte(d.ohctl("--json", "audit", "--limit", "0"))})
		sinks = append(sinks, sink{"ohctl ls --all", []byte(d.ohctl("--json", "ls", "--all"))})
		for _, l := range []string{"secret", "git-host", "llm", "oauth"} {
			sinks = append(sinks, sink{"ohctl " + l + " ls", []byte(d.ohctl("--json", l, "ls"))})
		}
		sinks = append(sinks, sink{"the engine's record of every container", []byte(b.everything(t))})
		sinks = append(sinks, sink{"the container's output", []byte(b.output(t, c.ContainerID))})
		if got := leaks(values, sinks); len(got) > 0 {
			t.Errorf("leaks:\n  %s", strings.Join(got, "\n  "))
		}

		// The environment of every process. The inner server itself is the one
		// exception: the agent server's only way to receive its session key is
		// OH_SESSION_API_KEYS_0, which ohctl inner-exec sets for it alone.
		envs := processEnvirons(t)
		if _, ok := envs[d.cmd.Process.Pid]; !ok {
			t.Errorf("the environment of ohd (pid %d) could not be read: the scan below would miss it", d.cmd.Process.Pid)
		}
		innerKeyEnv := append([]byte("OH_SESSION_API_KEYS_0="), bytes.TrimSpace(innerKey)...)
		innerServers, scanned := 0, 0
		for pid, pe := range envs {
			scanned++
			env, cmdline := pe[0], pe[1]
			argv0, _, _ := bytes.Cut(cmdline, []byte{0})
			for _, v := range values {
				if !bytes.Contains(env, v.value) {
					continue
				}
				if v.what == "inner session key" && string(argv0) == "/usr/local/bin/standin" && bytes.Count(env, v.value) == 1 && hasEnvEntry(env, innerKeyEnv) {
					innerServers++
					continue
				}
				t.Errorf("the %s appears in the environment of pid %d (%q)", v.what, pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
		if innerServers != 1 {
			t.Errorf("found the inner key in %d inner servers' environments, want exactly 1 (is the scan working?)", innerServers)
		}
		t.Logf("searched %d values in %d sinks (%d error bodies) and the environments of %d processes", len(values), len(sinks), len(errorBodies), scanned)
	})
}

func hasEnvEntry(env, entry []byte) bool {
	for _, e := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(e, entry) {
			return true
		}
	}
	return false
}

// TestDaemonNotDumpable runs ohd as an ordinary user (uid 1000, local
// runtime) and shows that another process of that same uid cannot read
// its environment, while it can read the environment of any other process
// of the uid: ohd is not dumpable (PR_SET_DUMPABLE=0), so its secrets in
// memory are out of reach of the user's other programs.
func TestDaemonNotDumpable(t *testing.T) {
	testenv.RequireRoot(t)
	binaries(t)
	uid, gid := testenv.UnprivilegedUID, testenv.UnprivilegedGID
	base := testenv.TempDir(t)
	home := filepath.Join(base, "home")
	runDir, err := os.MkdirTemp("/tmp", "ohdrun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	for _, dir := range []string{home, filepath.Join(home, ".local", "state"), runDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	testenv.ChownR(t, home, uid, gid)
	testenv.ChownR(t, runDir, uid, gid)
	marker := "OHD_TEST_MARKER=" + store.NewID()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"), "XDG_RUNTIME_DIR=" + runDir, marker}

	socket := filepath.Join(runDir, "ohd", "ohd.sock")
	ohd := testenv.AsUser(exec.Command(built.ohd, "serve", "--runtime", "local", "--listen", freePort(t), "--log-format", "json"), uid, gid)
	ohd.Env = env
	var logs testenv.SyncBuffer
	ohd.Stdout, ohd.Stderr = &logs, &logs
	if err := ohd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = ohd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = ohd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = ohd.Process.Kill()
			<-done
		}
	})
	waitFor(t, 60*time.Second, "ohd as uid 1000 to answer on "+socket, func() bool {
		select {
		case <-done:
			t.Fatalf("ohd as uid %d exited:\n%s", uid, logs.String())
		default:
		}
		_, err := runOhctl(socket, nil, "ls")
		return err == nil
	})
	// It serves: a secret is in its store (and its memory).
	if _, err := runOhctl(socket, strings.NewReader("in-memory-"+store.NewID()), "secret", "set", "s"); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ohd.Process.Pid))
	if err != nil || !strings.Contains(string(status), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid)) {
		t.Fatalf("ohd does not run as uid %d: %v\n%s", uid, err, status)
	}

	// An ordinary process of the same uid, with the same marker.
	other := testenv.AsUser(exec.Command("sleep", "300"), uid, gid)
	other.Env = env
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })

	readAs := func(pid int) (string, error) {
		cmd := testenv.AsUser(exec.Command("cat", fmt.Sprintf("/proc/%d/environ", pid)), uid, gid)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			return stdout.String(), fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
		}
		return stdout.String(), nil
	}
	// Control: a same-uid process can read an ordinary process's environment.
	got, err := readAs(other.Process.Pid)
	if err != nil || !strings.Contains(got, marker) {
		t.Fatalf("uid %d reading the environment of its own sleep: %v (marker found: %v): the check below would prove nothing", uid, err, strings.Contains(got, marker))
	}
	// ohd's is refused.
	got, err = readAs(ohd.Process.Pid)
	if err == nil || strings.Contains(got, marker) {
		t.Errorf("uid %d read ohd's environment (marker found: %v): ohd is dumpable", uid, strings.Contains(got, marker))
	} else if !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("reading ohd's environment failed, but not with EACCES: %v", err)
	} else {
		t.Logf("uid %d reading ohd's environment: %v", uid, err)
	}
}
