package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// standinBin is the stand-in inner agent server, built once by TestMain.
var standinBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ohd-proxy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	standinBin = filepath.Join(dir, "standin")
	cmd := exec.Command("go", "build", "-o", standinBin, "github.com/ohd-dev/ohd/integration/standin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build integration/standin: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Outer keys every test proxy accepts.
var outerKeys = []string{"outer-key-one-0123456789abcdef", "k2", "outer-key-three-with-a-much-longer-value-than-the-others"}

const wrongKey = "outer-key-one-0123456789abcdeX"

func randomKey(t testing.TB) []byte {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte("inner-" + hex.EncodeToString(b))
}

// standin is a running stand-in process.
type standin struct {
	addr string
	key  []byte
	cmd  *exec.Cmd
	log  *testenv.SyncBuffer
	done chan struct{} // closed once the process is reaped
	once sync.Once
}

// startStandin runs the stand-in on 127.0.0.1:0 with a fresh inner key and
// returns once it listens. It is stopped when t ends.
func startStandin(t testing.TB, env ...string) *standin {
	t.Helper()
	st := &standin{key: randomKey(t), log: &testenv.SyncBuffer{}, done: make(chan struct{})}
	cmd := exec.Command(standinBin)
	cmd.Env = append([]string{
		"PATH=/usr/bin:/bin",
		"STANDIN_ADDR=127.0.0.1:0",
		"OH_SESSION_API_KEYS_0=" + string(st.key),
		"OH_CONVERSATIONS_PATH=" + testenv.TempDir(t),
		// Not the relative default: the test's directory is the package's.
		"OH_BASH_EVENTS_DIR=" + filepath.Join(testenv.TempDir(t), "bash_events"),
	}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st.cmd = cmd
	addrc := make(chan string, 1)
	var drain sync.WaitGroup
	drain.Add(1)
	go func() {
		defer drain.Done()
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(st.log, line)
			if !sent && strings.Contains(line, `msg="standin: listening"`) {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addrc <- a
						sent = true
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		drain.Wait()
		_ = cmd.Wait()
		close(st.done)
	}()
	t.Cleanup(st.stop)
	select {
	case st.addr = <-addrc:
	case <-st.done:
		t.Fatalf("standin exited before listening:\n%s", st.log.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("standin did not listen within 20s:\n%s", st.log.String())
	}
	return st
}

// stop ends the process (SIGTERM, then SIGKILL) and reaps it.
func (st *standin) stop() {
	st.once.Do(func() {
		_ = st.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-st.done:
		case <-time.After(5 * time.Second):
			_ = st.cmd.Process.Kill()
			<-st.done
		}
	})
}

// fakeConversations stands in for conversation.Manager: each conversation
// is a real stand-in process; it records the calls it gets.
type fakeConversations struct {
	t    testing.TB
	root string // where worktree directories are made

	mu    sync.Mutex
	convs map[string]*fakeConv
	// innerInfo is what InnerInfo answers per id.
	innerInfo map[string]json.RawMessage
	calls     []string
	reqs      []conversation.CreateRequest
	// knobs
	badWorkingDir bool            // hand the inner server a working dir that does not exist
	createErr     error           // Create fails with it (after validation), having undone everything
	undoScoped    func(id string) // what the manager's undo of a failed create removes
	innerDown     bool            // kill the stand-in before the forward step
	local         bool            // the local runtime: no inner server
	tap           bool            // put a recording proxy in front of new stand-ins
	taps          map[string]*tapServer
	// viaDial gives targets an Addr where nothing listens and a Dial that
	// reaches the stand-in, as the manager does for a container it can
	// enter; dials counts its calls.
	viaDial bool
	dials   atomic.Int64
}

type fakeConv struct {
	rec   store.Conversation
	inner *standin
	addr  string // overrides inner's address (custom inner servers)
	key   []byte
}

func newFake(t testing.TB) *fakeConversations {
	return &fakeConversations{t: t, root: testenv.TempDir(t), convs: map[string]*fakeConv{}, taps: map[string]*tapServer{}}
}

func (f *fakeConversations) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// called returns the recorded calls that start with prefix.
func (f *fakeConversations) called(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// undo removes what a failed create kept of its credentials.
func (f *fakeConversations) undo(id string) {
	if f.undoScoped != nil {
		f.undoScoped(id)
	}
}

func (f *fakeConversations) Create(ctx context.Context, req conversation.CreateRequest) (store.Conversation, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if err := req.Validate(); err != nil {
		f.record("create-invalid %s", req.ID)
		return store.Conversation{}, err
	}
	if f.createErr != nil {
		return store.Conversation{}, f.createErr
	}
	if st, err := os.Stat(req.Workspace); err != nil || !st.IsDir() {
		f.record("create-invalid %s", req.ID)
		return store.Conversation{}, fmt.Errorf("%w: workspace %s is not a directory", conversation.ErrInvalid, req.Workspace)
	}
	id := req.ID
	if id == "" {
		id = store.NewID()
	}
	f.mu.Lock()
	_, exists := f.convs[id]
	f.mu.Unlock()
	if exists {
		return store.Conversation{}, fmt.Errorf("%w: conversation %s already exists", conversation.ErrConflict, id)
	}
	now := time.Now().UTC()
	rec := store.Conversation{
		ID: id, State: store.StateProvisioning, Runtime: "docker", ImageID: "sha256:standin-test",
		Workspace: req.Workspace, WorkingDir: req.Workspace, Request: req.Request,
		CreatedAt: now, UpdatedAt: now, LastActiveAt: now,
	}
	if req.Worktree {
		rec.Worktree = filepath.Join(f.root, "worktrees", id, filepath.Base(req.Workspace))
		rec.Branch = "openhands/" + id
		if err := os.MkdirAll(rec.Worktree, 0o755); err != nil {
			return store.Conversation{}, &conversation.StepError{ID: id, Step: "worktree", Err: err}
		}
		rec.WorkingDir = rec.Worktree
	}
	if f.badWorkingDir {
		rec.WorkingDir = filepath.Join(f.root, "does-not-exist")
	}
	// As the manager: the create's credentials are kept once its record
	// exists, and a failure after that removes them (undoScoped stands
	// for the manager's removal of "<id>." credentials).
	if req.Prepare != nil {
		g, err := req.Prepare(ctx, id)
		if err != nil {
			f.undo(id)
			return store.Conversation{}, &conversation.StepError{ID: id, Step: "mediate", Err: err}
		}
		rec.Grants = rec.Grants.Merge(g)
	}
	fc := &fakeConv{rec: rec}
	var target conversation.Target
	if f.local {
		rec.Runtime = "local"
	} else {
		fc.inner = startStandin(f.t, "OHD_CONVERSATION_ID="+id)
		fc.key = fc.inner.key
		target = conversation.Target{Addr: fc.inner.addr, InnerKey: fc.inner.key}
		if f.tap {
			tp := newTap(f.t, fc.inner.addr)
			f.mu.Lock()
			f.taps[id] = tp
			f.mu.Unlock()
			target.Addr = tp.addr
		}
		if f.innerDown {
			fc.inner.stop()
		}
	}
	if req.Forward != nil {
		if err := req.Forward(ctx, rec, target); err != nil {
			if fc.inner != nil {
				fc.inner.stop()
			}
			f.record("create-failed %s", id)
			f.undo(id)
			return store.Conversation{}, &conversation.StepError{ID: id, Step: "forward", Err: err}
		}
	}
	rec.State = store.StateRunning
	fc.rec = rec
	f.mu.Lock()
	f.convs[id] = fc
	f.mu.Unlock()
	f.record("create %s", id)
	return rec, nil
}

func (f *fakeConversations) Get(id string) (store.Conversation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.convs[id]
	if !ok || fc.rec.State == store.StateDeleted {
		return store.Conversation{}, fmt.Errorf("conversation %s: %w", id, conversation.ErrNotFound)
	}
	return fc.rec.Clone(), nil
}

func (f *fakeConversations) List() []store.Conversation {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Conversation
	for _, fc := range f.convs {
		out = append(out, fc.rec.Clone())
	}
	slices.SortFunc(out, func(a, b store.Conversation) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

func (f *fakeConversations) Target(ctx context.Context, id string) (conversation.Target, error) {
	f.record("target %s", id)
	f.mu.Lock()
	fc, ok := f.convs[id]
	if !ok || !fc.rec.State.Live() {
		f.mu.Unlock()
		return conversation.Target{}, fmt.Errorf("conversation %s: %w", id, conversation.ErrNotFound)
	}
	if fc.rec.Runtime == "local" {
		f.mu.Unlock()
		return conversation.Target{}, nil
	}
	if fc.rec.State == store.StateStopped {
		f.mu.Unlock()
		f.record("start %s", id)
		inner := startStandin(f.t, "OHD_CONVERSATION_ID="+id)
		f.mu.Lock()
		fc.inner, fc.key = inner, inner.key
		fc.rec.State = store.StateRunning
	}
	addr := fc.addr
	if addr == "" {
		addr = fc.inner.addr
	}
	key := fc.key
	f.mu.Unlock()
	t := conversation.Target{Addr: addr, InnerKey: key}
	if f.viaDial {
		t.Addr, t.DialAddr = deadAddr(f.t), addr
		t.Dial = func(ctx context.Context) (net.Conn, error) {
			f.dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
	}
	return t, nil
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func (f *fakeConversations) Remove(ctx context.Context, id string, opts conversation.RemoveOptions) (store.Conversation, error) {
	f.record("remove %s", id)
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.convs[id]
	if !ok || fc.rec.State == store.StateDeleted {
		return store.Conversation{}, fmt.Errorf("conversation %s: %w", id, conversation.ErrNotFound)
	}
	if fc.inner != nil {
		fc.inner.stop()
	}
	fc.rec.State = store.StateDeleted
	return fc.rec.Clone(), nil
}

func (f *fakeConversations) Touch(id string) { f.record("touch %s", id) }

// InnerInfo answers what a test put in innerInfo, as if the inner server
// had persisted it on the host.
func (f *fakeConversations) InnerInfo(id string) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if raw, ok := f.innerInfo[id]; ok {
		return raw, nil
	}
	return nil, openhands.ErrNoState
}

// stopConv stops a conversation's inner server as an idle stop would.
func (f *fakeConversations) stopConv(id string) {
	f.mu.Lock()
	fc := f.convs[id]
	fc.rec.State = store.StateStopped
	inner := fc.inner
	f.mu.Unlock()
	inner.stop()
}

// innerOf returns a conversation's running stand-in.
func (f *fakeConversations) innerOf(id string) *standin {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.convs[id].inner
}

// tapOf returns the recording proxy in front of a conversation's stand-in.
func (f *fakeConversations) tapOf(id string) *tapServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taps[id]
}

// createRequests returns the requests Create got.
func (f *fakeConversations) createRequests() []conversation.CreateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// addCustom registers a running conversation served by the server at addr.
func (f *fakeConversations) addCustom(addr string, key []byte) string {
	id := store.NewID()
	now := time.Now().UTC()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.convs[id] = &fakeConv{
		rec:  store.Conversation{ID: id, State: store.StateRunning, Runtime: "docker", Workspace: f.root, WorkingDir: f.root, CreatedAt: now, UpdatedAt: now},
		addr: addr, key: key,
	}
	return id
}

// tapServer records the requests it forwards to a stand-in.
type tapServer struct {
	addr string
	mu   sync.Mutex
	reqs []tapped
}

type tapped struct {
	method, path string
	header       http.Header
	body         []byte
	uri          string // the request URI, query included
}

func newTap(t testing.TB, target string) *tapServer {
	tp := &tapServer{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		tp.mu.Lock()
		tp.reqs = append(tp.reqs, tapped{r.Method, r.URL.Path, r.Header.Clone(), b, r.RequestURI})
		tp.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	tp.addr = hs.Listener.Addr().String()
	return tp
}

func (tp *tapServer) requests() []tapped {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.reqs)
}

// testProxy is a proxy served on a real loopback listener.
type testProxy struct {
	*Server
	url  string
	host string
	fake *fakeConversations
}

func startProxy(t testing.TB, fake *fakeConversations, mutate func(*Options)) *testProxy {
	t.Helper()
	keys := make([][]byte, len(outerKeys))
	for i, k := range outerKeys {
		keys[i] = []byte(k)
	}
	opts := Options{Conversations: fake, Keys: keys}
	if mutate != nil {
		mutate(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testProxy{Server: s, url: "http://" + ln.Addr().String(), host: ln.Addr().String(), fake: fake}
}

// do sends a request with key ("" for none) and returns the response with
// its body read.
func (p *testProxy) do(t testing.TB, method, path, key string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, p.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-Session-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// create makes a conversation through the API and returns its id.
func (p *testProxy) create(t testing.TB, body map[string]any) string {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["workspace"]; !ok {
		body["workspace"] = map[string]any{"kind": "LocalWorkspace", "working_dir": p.fake.root}
	}
	b, _ := json.Marshal(body)
	resp, rb := p.do(t, "POST", "/api/conversations", outerKeys[0], bytes.NewReader(b), "Content-Type", "application/json")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/conversations = %d %s, want 201", resp.StatusCode, rb)
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rb, &info); err != nil || info.ID == "" {
		t.Fatalf("create answer %s: no id (%v)", rb, err)
	}
	return info.ID
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}
