package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Knobs: the defaults keep CI short; a longer run sets them higher.

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// smallDockerDaemon starts ohd with the docker runtime, the test image and
// small containers (OHD_TEST_CONTAINER_MEMORY bytes, default 64 MiB).
func smallDockerDaemon(t testing.TB, env []string, extra ...string) *daemon {
	t.Helper()
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	mem := envInt("OHD_TEST_CONTAINER_MEMORY", 64<<20)
	args := append([]string{"--image", img, "--memory", strconv.Itoa(mem), "--ready-timeout", "90s"}, extra...)
	d := startDaemon(t, daemonOptions{Runtime: "docker", Env: env, Args: args})
	d.serverID() // cached for the cleanup, which may run after ohd is gone
	t.Cleanup(func() { removeContainersOf(t, d) })
	return d
}

// removeContainersOf force-removes every container of d's server with one
// docker command (removeServerContainers runs one per container).
func removeContainersOf(t testing.TB, d *daemon) {
	id := d.serverID()
	if id == "" {
		return
	}
	out, _ := dockerCmd("ps", "-aq", "--filter", "label=dev.ohd.server="+id).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = dockerCmd(append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

// apiClient talks to the conversation API and returns errors instead of
// failing the test, so that goroutines can use it.
type apiClient struct {
	base, key string
	hc        *http.Client
}

func newAPIClient(d *daemon, conns int) *apiClient {
	return &apiClient{
		base: "http://" + d.listen,
		key:  d.apiKey(),
		hc: &http.Client{
			Timeout:       3 * time.Minute,
			Transport:     &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

func (c *apiClient) do(ctx context.Context, method, path string, body []byte, header ...string) (apiResponse, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return apiResponse{}, err
	}
	req.Header.Set("X-Session-API-Key", c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResponse{}, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return apiResponse{Status: resp.StatusCode, Body: b, Header: resp.Header}, nil
}

// create creates one conversation through POST /api/conversations.
func (c *apiClient) create(ctx context.Context, workingDir string) (string, error) {
	body, _ := json.Marshal(map[string]any{"workspace": map[string]any{"working_dir": workingDir}, "worktree": true})
	r, err := c.do(ctx, "POST", "/api/conversations", body)
	if err != nil {
		return "", err
	}
	if r.Status != http.StatusCreated {
		return "", fmt.Errorf("create in %s = %d %s", workingDir, r.Status, r.Body)
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.Body, &info); err != nil || info.ID == "" {
		return "", fmt.Errorf("create answer %s: %v", r.Body, err)
	}
	return info.ID, nil
}

// createMany creates n conversations with worktrees, spread over repos,
// OHD_TEST_CREATE_PARALLEL (default 8) at a time, and returns their
// records in creation order. Creates in one repository run in parallel
// too (worktree_race_test.go pins the race this once exposed).
func createMany(t testing.TB, d *daemon, repos []string, n int) []store.Conversation {
	t.Helper()
	api := newAPIClient(d, 16)
	parallel := envInt("OHD_TEST_CREATE_PARALLEL", 8)
	ids := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := i % len(repos)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			ids[i], errs[i] = api.create(ctx, repos[r])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("create %d conversations: %v\n--- ohd log ---\n%s", n, err, tail(d.logs.String(), 30))
	}
	t.Logf("created %d conversations, %d at a time, in %v", n, parallel, time.Since(start).Round(time.Millisecond))
	recs := records(t, d)
	out := make([]store.Conversation, n)
	for i, id := range ids {
		c, ok := recs[id]
		if !ok || c.State != store.StateRunning {
			t.Fatalf("conversation %s after create: %+v", id, c)
		}
		out[i] = c
	}
	return out
}

// records returns every record of d by id.
func records(t testing.TB, d *daemon) map[string]store.Conversation {
	t.Helper()
	var convs []store.Conversation
	d.ohctlJSON(&convs, "ls", "--all")
	m := make(map[string]store.Conversation, len(convs))
	for _, c := range convs {
		m[c.ID] = c
	}
	return m
}

// containerState is what docker says about a container.
type containerState struct {
	ID           string
	Running      bool
	StartedAt    string
	RestartCount float64
}

// inspectAll inspects containers with one docker command.
func inspectAll(t testing.TB, ids ...string) map[string]containerState {
	t.Helper()
	out, err := dockerCmd(append([]string{"inspect"}, ids...)...).Output()
	if err != nil {
		t.Fatalf("docker inspect %v: %v", ids, err)
	}
	var list []map[string]any
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	m := map[string]containerState{}
	for _, c := range list {
		s := containerState{ID: c["Id"].(string)}
		s.Running, _ = get(c, "State", "Running").(bool)
		s.StartedAt, _ = get(c, "State", "StartedAt").(string)
		s.RestartCount, _ = c["RestartCount"].(float64)
		m[s.ID] = s
	}
	return m
}

// newBrokerClient is a broker client on the conversation's socket and token.
func newBrokerClient(c store.Conversation) *broker.Client {
	return broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"))
}

// proxiedGet checks a request forwarded by ohd to the inner server.
func proxiedGet(ctx context.Context, api *apiClient, id, what string) error {
	r, err := api.do(ctx, "GET", "/api/conversations/"+id+"/echo/"+what, nil)
	if err != nil {
		return fmt.Errorf("proxied GET for %s: %w", id, err)
	}
	var echo struct {
		Path string `json:"path"`
	}
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &echo) != nil || !strings.HasSuffix(echo.Path, "/echo/"+what) {
		return fmt.Errorf("proxied GET for %s = %d %s", id, r.Status, r.Body)
	}
	return nil
}

// wsEcho opens the conversation's event WebSocket through ohd and checks
// a message comes back.
func wsEcho(ctx context.Context, d *daemon, key, id string) error {
	conn, _, err := websocket.Dial(ctx, "ws://"+d.listen+"/sockets/events/"+id, &websocket.DialOptions{HTTPHeader: http.Header{"X-Session-Api-Key": {key}}})
	if err != nil {
		return fmt.Errorf("WS %s: dial: %w", id, err)
	}
	defer conn.CloseNow()
	if _, hello, err := conn.Read(ctx); err != nil || !bytes.Contains(hello, []byte(id)) {
		return fmt.Errorf("WS %s: first message %q, %v", id, hello, err)
	}
	msg := []byte(`{"ping":"` + id + `"}`)
	if err := conn.Write(ctx, websocket.MessageText, msg); err != nil {
		return fmt.Errorf("WS %s: write: %w", id, err)
	}
	if _, echo, err := conn.Read(ctx); err != nil || !bytes.Equal(echo, msg) {
		return fmt.Errorf("WS %s: echo %q, %v", id, echo, err)
	}
	conn.Close(websocket.StatusNormalClosure, "")
	return nil
}

// worktreeState describes a worktree as a user would check it: its HEAD,
// every file with a digest of its content, and the host's registration.
func worktreeState(t testing.TB, c store.Conversation) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "HEAD %s\n", testenv.Git(t, c.Worktree, "rev-parse", "HEAD"))
	fmt.Fprintf(&b, "branch %s\n", testenv.Git(t, c.Worktree, "symbolic-ref", "HEAD"))
	err := filepath.WalkDir(c.Worktree, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s %s\n", strings.TrimPrefix(p, c.Worktree), hex.EncodeToString(sum[:8]))
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", c.Worktree, err)
	}
	e := entryFor(porcelain(t, c.Repo), c.Worktree)
	if e == nil {
		b.WriteString("NOT REGISTERED\n")
	} else {
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "registration %s %s\n", k, e[k])
		}
	}
	return b.String()
}

// timeBrokerAnswers polls every conversation's broker with GET /v1/whoami
// while start runs, and returns, per conversation, the time from just
// before start was called (so before ohd's process exists) to the first
// answer of the broker.
func timeBrokerAnswers(t testing.TB, convs []store.Conversation, start func()) []time.Duration {
	t.Helper()
	got := make([]time.Duration, len(convs))
	errs := make([]error, len(convs))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, c := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newBrokerClient(c)
			defer cl.Close()
			for {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				w, err := cl.Whoami(cctx)
				ccancel()
				if err == nil {
					got[i] = time.Since(t0)
					if w.ID != c.ID {
						errs[i] = fmt.Errorf("broker of %s answered whoami for %s", c.ID, w.ID)
					}
					return
				}
				if ctx.Err() != nil {
					errs[i] = fmt.Errorf("broker of %s never answered: %w", c.ID, err)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	start()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return got
}

func maxDuration(ds []time.Duration) time.Duration {
	return slices.Max(ds)
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestBackendReliabilityRestartWithLiveConversations restarts ohd (SIGTERM, then
// SIGKILL) under live conversations: their containers are untouched, each
// broker answers within a second of the new process starting, proxied
// HTTP and WebSockets work again, and the worktrees are as they were.
func TestBackendReliabilityRestartWithLiveConversations(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		n := envInt("OHD_RESTART_CONVERSATIONS", 20)
		brokerDeadline := envDuration("OHD_RESTART_BROKER_DEADLINE", time.Second)
		d := b.daemon(t, "--memory", strconv.Itoa(envInt("OHD_TEST_CONTAINER_MEMORY", 64<<20)))
		// Two conversations per repository: a restart must leave sibling
		// registrations alone too.
		repos := make([]string, (n+1)/2)
		for i := range repos {
			repos[i] = testenv.NewRepo(t, testenv.RepoOptions{})
		}
		convs := createMany(t, d, repos, n)

		// Work the agents left, uncommitted and committed.
		for i, c := range convs {
			testenv.WriteFile(t, filepath.Join(c.Worktree, "agent-work.txt"), "work of "+c.ID+"\n")
			if i%2 == 0 {
				testenv.Git(t, c.Worktree, "add", "agent-work.txt")
				testenv.Git(t, c.Worktree, "commit", "-q", "-m", "agent commit "+c.ID)
			}
		}
		ids := make([]string, n)
		wantTrees := make([]string, n)
		for i, c := range convs {
			ids[i] = c.ContainerID
			wantTrees[i] = worktreeState(t, c)
		}
		wantContainers := b.states(t, ids...)
		for _, id := range ids {
			if !wantContainers[id].Running {
				t.Fatalf("container %s is not running before the restart", id)
			}
		}
		api := newAPIClient(d, 32)
		key := d.apiKey()

		for _, how := range []string{"SIGTERM", "SIGKILL"} {
			if how == "SIGTERM" {
				d.stop()
			} else {
				d.kill()
			}
			var controlAfter time.Duration
			lat := timeBrokerAnswers(t, convs, func() {
				t0 := time.Now()
				d.start()
				controlAfter = time.Since(t0)
			})
			t.Logf("%s restart with %d conversations: control socket answered after %v; brokers answered after max %v, median %v (from just before the process started)",
				how, n, controlAfter.Round(time.Millisecond), maxDuration(lat).Round(time.Millisecond), medianDuration(lat).Round(time.Millisecond))
			for i, l := range lat {
				if l > brokerDeadline {
					t.Errorf("%s: broker of %s answered %v after the restart, want within %v", how, convs[i].ID, l, brokerDeadline)
				}
			}

			// The containers were not touched.
			gotContainers := b.states(t, ids...)
			recs := records(t, d)
			for i, c := range convs {
				r := recs[c.ID]
				if r.State != store.StateRunning || r.ContainerID != c.ContainerID || r.HostPort != c.HostPort {
					t.Errorf("%s: record of %s = state %s container %s port %d, want running in %s on %d",
						how, c.ID, r.State, shortID(r.ContainerID), r.HostPort, shortID(c.ContainerID), c.HostPort)
				}
				if got, want := gotContainers[ids[i]], wantContainers[ids[i]]; got != want {
					t.Errorf("%s: container of %s changed across the restart:\n got %+v\nwant %+v", how, c.ID, got, want)
				}
			}

			// Proxied HTTP and WebSocket work again.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			for _, c := range convs {
				if err := proxiedGet(ctx, api, c.ID, "after-"+how); err != nil {
					t.Errorf("%s: %v", how, err)
				}
				if err := wsEcho(ctx, d, key, c.ID); err != nil {
					t.Errorf("%s: %v", how, err)
				}
			}
			cancel()

			// The worktrees are unchanged, still registered, locked, not prunable.
			for i, c := range convs {
				if got := worktreeState(t, c); got != wantTrees[i] {
					t.Errorf("%s: worktree of %s changed:\n--- before\n%s--- after\n%s", how, c.ID, wantTrees[i], got)
				}
				e := entryFor(porcelain(t, c.Repo), c.Worktree)
				if _, prunable := e["prunable"]; e == nil || prunable || e["locked"] == "" {
					t.Errorf("%s: registration of %s = %v, want locked and not prunable", how, c.ID, e)
				}
			}
			checkInvariants(t, d, repos...)
			if t.Failed() {
				t.Logf("--- ohd log ---\n%s", tail(d.logs.String(), 120))
				return
			}
		}
	})
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// TestBackendEngineTrouble puts a relay of the test's own between ohd and
// its engine (the Docker engine's socket; the Kubernetes API server) and
// cuts it: creates fail with an error that says what is wrong, live
// conversations keep answering, and once the relay is back ohd serves
// fully again (creates, engine events). Containers killed or removed
// behind ohd's back are noticed and started again on demand.
func TestBackendEngineTrouble(t *testing.T) {
	eachBackend(t, testEngineTrouble)
}

func testEngineTrouble(t *testing.T, be backend) {
	var (
		relay      *engineRelay
		d          *daemon
		checkCause = checkEngineMessage
		// apiAddr is how the conversation API's error names the engine's
		// address.
		apiAddr string
	)
	if be.name == "docker" {
		relay = newEngineRelay(t)
		d = smallDockerDaemon(t, []string{"DOCKER_HOST=" + relay.dockerHost()})
	} else {
		var kubeconfig string
		relay, kubeconfig = apiServerRelay(t)
		d = be.daemon(t, "--kubeconfig", kubeconfig)
		checkCause = checkAPIServerMessage
		// The test cluster's API server is on the loopback, and the
		// conversation API scrubs every loopback address from what its
		// clients read (ohctl, on the control socket, names it).
		apiAddr = "[conversation server]"
	}
	if apiAddr == "" {
		apiAddr = relay.path
	}
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	convs := createMany(t, d, []string{repo}, 2)
	a, b := convs[0], convs[1]
	api := newAPIClient(d, 8)
	key := d.apiKey()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// A container killed behind ohd's back (relay up): noticed, and the
	// next request starts it again.
	be.crash(t, a.ContainerID)
	waitForState(t, d, a.ID, store.StateStopped, 15*time.Second)
	if err := proxiedGet(ctx, api, a.ID, "after-kill"); err != nil {
		t.Fatalf("first request after the container's kill: %v", err)
	}
	if r := d.record(a.ID); r.State != store.StateRunning || !be.running(t, r.ContainerID) {
		t.Fatalf("after the request that restarts it: %+v", r)
	}

	// The engine goes away for ohd.
	relay.cut()
	cutFor := envDuration("OHD_ENGINE_CUT", 3*time.Second)
	cutAt := time.Now()
	before := engineTroubleState(t, d, repo)

	r, err := api.do(ctx, "POST", "/api/conversations", mustJSON(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true}))
	if err != nil {
		t.Fatalf("create while the engine is away: %v", err)
	}
	var e struct {
		Detail string `json:"detail"`
		Step   string `json:"step"`
	}
	_ = json.Unmarshal(r.Body, &e)
	t.Logf("conversation API create while the engine is away: %d %s", r.Status, r.Body)
	if r.Status != http.StatusServiceUnavailable || e.Step == "" || r.Header.Get("X-Ohd-Failed-Step") != e.Step {
		t.Errorf("create while the engine is away = %d %s, want 503 naming the failed step", r.Status, r.Body)
	}
	checkCause(t, "conversation API create", e.Detail, apiAddr)

	_, err = d.ohctlErr("create", "--repo", repo, "--worktree")
	var oe *ohctlError
	if !errors.As(err, &oe) || oe.code == 0 {
		t.Errorf("ohctl create while the engine is away succeeded: %v", err)
	} else {
		t.Logf("ohctl create while the engine is away: exit %d: %s", oe.code, strings.TrimSpace(oe.stderr))
		checkCause(t, "ohctl create", oe.stderr, relay.path)
	}

	// Live conversations keep working all the while: the proxy goes to
	// 127.0.0.1:<port> and the brokers are ohd's own.
	checks := 0
	for checks == 0 || time.Since(cutAt) < cutFor {
		var errs []error
		for _, c := range convs {
			c = d.record(c.ID)
			errs = append(errs, proxiedGet(ctx, api, c.ID, "during-cut"))
			cl := newBrokerClient(c)
			if _, err := cl.Whoami(ctx); err != nil {
				errs = append(errs, fmt.Errorf("broker of %s: %w", c.ID, err))
			}
			cl.Close()
			errs = append(errs, wsEcho(ctx, d, key, c.ID))
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("while the engine is away (round %d): %v", checks+1, err)
		}
		checks++
		time.Sleep(100 * time.Millisecond)
	}
	if diff := cmp.Diff(before, engineTroubleState(t, d, repo)); diff != "" {
		t.Errorf("the failed creates changed state (-before +after):\n%s", diff)
	}
	t.Logf("engine away for %v; live conversations answered %d rounds of HTTP, WebSocket and broker checks", time.Since(cutAt).Round(time.Millisecond), checks)

	// Back: full service.
	relay.restore()
	restoredAt := time.Now()
	var c3 string
	for {
		c3, err = api.create(ctx, repo)
		if err == nil {
			break
		}
		if time.Since(restoredAt) > 30*time.Second {
			t.Fatalf("create after the engine came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("first create after the engine came back succeeded %v after the restore", time.Since(restoredAt).Round(time.Millisecond))
	if err := proxiedGet(ctx, api, c3, "new"); err != nil {
		t.Error(err)
	}
	// Engine events resume: a container removed behind ohd's back is
	// noticed (the event stream reconnects, with a resync, within its
	// backoff of at most 5s).
	be.kill(t, b.ContainerID)
	removedAt := time.Now()
	waitForState(t, d, b.ID, store.StateStopped, 30*time.Second)
	t.Logf("container removed %v after the restore was noticed in %v", removedAt.Sub(restoredAt).Round(time.Millisecond), time.Since(removedAt).Round(time.Millisecond))
	if err := proxiedGet(ctx, api, b.ID, "after-rm"); err != nil {
		t.Fatalf("first request after the container's removal: %v", err)
	}
	if r := d.record(b.ID); r.State != store.StateRunning || r.ContainerID == b.ContainerID || r.ContainerID == "" {
		t.Errorf("after the request that starts it again: state %s container %s (removed: %s)", r.State, shortID(r.ContainerID), shortID(b.ContainerID))
	}
	if err := wsEcho(ctx, d, key, b.ID); err != nil {
		t.Error(err)
	}
	checkInvariants(t, d, repo)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// checkEngineMessage asserts an error says the engine is unreachable,
// where, and what to do.
func checkEngineMessage(t testing.TB, what, msg, addr string) {
	t.Helper()
	low := strings.ToLower(msg)
	if !strings.Contains(low, "docker") || !strings.Contains(low, "engine") {
		t.Errorf("%s: error %q does not say the Docker engine is the problem", what, msg)
	}
	if !strings.Contains(msg, addr) {
		t.Errorf("%s: error %q does not name the engine's address %s", what, msg, addr)
	}
	// ohd's own words at start-up ("start Docker (or point DOCKER_HOST at
	// a running engine)"), or the engine client's ("check if the path is
	// correct and if the daemon is running").
	if !strings.Contains(low, "start docker") && !strings.Contains(low, "docker_host") && !strings.Contains(low, "daemon is running") {
		t.Errorf("%s: error %q does not say what to do (start Docker, or point DOCKER_HOST at a running engine)", what, msg)
	}
}

// checkAPIServerMessage checks that msg says the Kubernetes API server at
// addr does not answer, and what to do.
func checkAPIServerMessage(t testing.TB, what, msg, addr string) {
	t.Helper()
	low := strings.ToLower(msg)
	if !strings.Contains(low, "kubernetes api server") {
		t.Errorf("%s: error %q does not say the Kubernetes API server is the problem", what, msg)
	}
	if !strings.Contains(msg, addr) {
		t.Errorf("%s: error %q does not name the API server's address %s", what, msg, addr)
	}
	if !strings.Contains(low, "kubeconfig") {
		t.Errorf("%s: error %q does not say what to do (check the API server, or --kubeconfig)", what, msg)
	}
}

// apiServerRelay starts a relay to the test cluster's API server and
// returns it with a kubeconfig that sends ohd through it.
func apiServerRelay(t testing.TB) (*engineRelay, string) {
	t.Helper()
	requireKube(t)
	cfg, err := clientcmd.LoadFromFile(os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.Contexts[cfg.CurrentContext]
	if kc == nil || cfg.Clusters[kc.Cluster] == nil {
		t.Fatalf("kubeconfig %s: no cluster for its current context %q", os.Getenv("KUBECONFIG"), cfg.CurrentContext)
	}
	cl := cfg.Clusters[kc.Cluster]
	u, err := url.Parse(cl.Server)
	if err != nil {
		t.Fatal(err)
	}
	relay := newAPIServerRelay(t, u.Host)
	u.Host = relay.path
	cl.Server = u.String()
	path := filepath.Join(testenv.TempDir(t), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return relay, path
}

// waitForState polls the record of id until it reaches state.
func waitForState(t testing.TB, d *daemon, id string, state store.State, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("conversation %s to become %s", id, state), func() bool {
		return d.record(id).State == state
	})
}

// engineTroubleState is what a failed create must leave as it was.
func engineTroubleState(t testing.TB, d *daemon, repo string) string {
	t.Helper()
	var b strings.Builder
	var live []string
	for _, c := range records(t, d) {
		if c.State.Live() {
			live = append(live, fmt.Sprintf("live %s %s", c.ID, c.State))
		}
	}
	out, _ := dockerCmd("ps", "-a", "--filter", "label=dev.ohd.server="+d.serverID(), "--format", "container {{.ID}} {{.State}}").Output()
	lines := append(live, strings.Split(strings.TrimSpace(string(out)), "\n")...)
	sort.Strings(lines)
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n")
	b.WriteString(testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"))
	b.WriteString(testenv.Git(t, repo, "worktree", "list", "--porcelain"))
	for _, dir := range []string{d.dirs.Worktrees, filepath.Join(d.dirs.Run, "conversations")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			fmt.Fprintf(&b, "%s/%s\n", dir, e.Name())
		}
	}
	return b.String()
}

// TestBackendReliabilityAPICreateCrashAfterForward kills ohd right after the
// conversation API's create was forwarded to the inner server and before
// the record says running; the restarted ohd undoes the create.
func TestBackendReliabilityAPICreateCrashAfterForward(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.start(t, daemonOptions{Failpoints: true, Env: []string{"OHD_FAILPOINTS=create/after-forward"},
			Args: []string{"--memory", strconv.Itoa(envInt("OHD_TEST_CONTAINER_MEMORY", 64<<20))}})
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		api := newAPIClient(d, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		r, err := api.do(ctx, "POST", "/api/conversations", mustJSON(map[string]any{"workspace": map[string]any{"working_dir": repo}, "worktree": true}))
		if err == nil {
			t.Errorf("create through a crash answered %d %s, want the connection to break", r.Status, r.Body)
		}
		if !d.waitExit(2 * time.Minute) {
			t.Fatalf("ohd did not die of SIGKILL at create/after-forward: %v\n%s", d.err, tail(d.logs.String(), 20))
		}
		// Before the restart: the crash left a container and a worktree.
		if len(b.ofServer(t, d.serverID())) == 0 {
			t.Fatal("no container after the crash: the failpoint did not hit after the container started")
		}
		d.opts.Env = nil
		d.start()
		convs := checkInvariants(t, d, repo)
		if len(convs) != 1 || convs[0].State != store.StateFailed {
			t.Errorf("records after the restart = %+v, want one failed record", convs)
		}
		assertNothingLeft(t, d, repo)
		// And the API no longer shows it.
		if r, err := api.do(ctx, "GET", "/api/conversations/count", nil); err != nil || strings.TrimSpace(string(r.Body)) != "0" {
			t.Errorf("count after the restart = %v %s, want 0", err, r.Body)
		}
	})
}
