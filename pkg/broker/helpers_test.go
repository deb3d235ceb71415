package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
)

// marker is in every secret value of this suite (secrets, passwords, API
// keys, OAuth tokens), so the hygiene checks can look for it in logs,
// audit records and error answers without knowing each value.
const marker = "ZZSECRETZZ"

// Environment variables that turn the test binary into a helper process.
const (
	helperEnv = "OHD_BROKER_TEST_HELPER" // "git": git credential helper; "whoami": print status and body of GET /v1/whoami
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "git":
		action := ""
		if len(os.Args) > 1 {
			action = os.Args[len(os.Args)-1]
		}
		if err := broker.GitCredentialHelper(context.Background(), action, os.Stdin, os.Stdout, os.Stderr, os.Getenv); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "whoami":
		os.Exit(helperWhoami())
	}
	os.Exit(m.Run())
}

// helperWhoami asks GET /v1/whoami on $OHD_BROKER_SOCKET with the token in
// $OHD_BROKER_TOKEN_FILE and prints "<status> <body>".
func helperWhoami() int {
	tok, err := os.ReadFile(os.Getenv(broker.EnvTokenFile))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hc := unixClient(os.Getenv(broker.EnvSocket))
	req, _ := http.NewRequest(http.MethodGet, "http://x/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("X-OHD-Request", "1")
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, b)
	return 0
}

func unixClient(socket string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", socket)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// env is one Broker on a temporary runtime dir, with an in-memory backend,
// a captured debug log and a record of every answer the tests saw that
// must not hold a value (errors, proxied answers). At cleanup it checks
// that none of those, no log line and no audit record holds a secret or a
// token.
type env struct {
	t       *testing.T
	dir     string
	key     []byte
	be      *brokertest.Backend
	b       *broker.Broker
	log     *testenv.SyncBuffer
	mu      sync.Mutex
	watched []string // answers that must hold no value
}

type envOption func(*broker.Options)

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	e := &env{t: t, be: brokertest.New(), log: &testenv.SyncBuffer{}}
	// A short runtime dir: socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "ohdb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e.dir = dir
	e.key = broker.DeriveKey([]byte("master key of the broker tests, 32+ bytes long"))
	e.b = e.newBroker(opts...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		e.checkHygiene()
	})
	return e
}

func (e *env) newBroker(opts ...envOption) *broker.Broker {
	e.t.Helper()
	o := broker.Options{
		RuntimeDir: e.dir,
		Key:        e.key,
		Backend:    e.be,
		Logger:     slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range opts {
		f(&o)
	}
	b, err := broker.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// open registers conv with the backend and opens its socket.
func (e *env) open(conv broker.Conversation) broker.Endpoint {
	e.t.Helper()
	e.be.SetConversation(conv)
	ep, err := e.b.Open(context.Background(), conv)
	if err != nil {
		e.t.Fatalf("Open(%q): %v", conv.ID, err)
	}
	return ep
}

func (e *env) token(id string, epoch uint64) string {
	return broker.Token(e.key, id, epoch)
}

// watch records an answer the hygiene check must find clean.
func (e *env) watch(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.watched = append(e.watched, s)
}

// request sends a request to socket with the given headers (the token and
// X-OHD-Request are not added) and returns the answer. Error answers are
// watched.
func (e *env) request(socket, method, path string, hdr http.Header, body io.Reader) (*http.Response, []byte) {
	e.t.Helper()
	hc := unixClient(socket)
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://ohd-broker"+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		e.watch(fmt.Sprintf("%d %v %s", resp.StatusCode, resp.Header, b))
	}
	return resp, b
}

// authed returns the headers of a well-formed request with token.
func authed(token string) http.Header {
	return http.Header{
		"Authorization": {"Bearer " + token},
		"X-Ohd-Request": {"1"},
	}
}

// client returns a broker.Client for ep.
func (e *env) client(ep broker.Endpoint) *broker.Client {
	c := broker.NewClient(ep.Socket, ep.TokenFile)
	e.t.Cleanup(c.Close)
	return c
}

// lastAudit waits for the n-th audit record (1-based) and returns it.
func (e *env) audit(n int) broker.AuditRecord {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := e.be.WaitAudit(ctx, n)
	if err != nil {
		e.t.Fatalf("waiting for audit record %d: %v (have %d)", n, err, len(recs))
	}
	return recs[n-1]
}

func (e *env) auditCount() int { return len(e.be.AuditRecords()) }

// checkHygiene fails the test if a log line, an audit record or a watched
// answer holds a secret value (marker) or a token.
func (e *env) checkHygiene() {
	e.t.Helper()
	e.mu.Lock()
	watched := append([]string(nil), e.watched...)
	e.mu.Unlock()
	for _, p := range hygieneProblems(e.log.String(), e.be.AuditRecords(), watched) {
		e.t.Error("hygiene: " + p)
	}
}

func hygieneProblems(log string, recs []broker.AuditRecord, watched []string) []string {
	var problems []string
	check := func(what, s string) {
		for _, bad := range []string{marker, "ohd1."} {
			if strings.Contains(s, bad) {
				problems = append(problems, fmt.Sprintf("%s holds %q:\n%s", what, bad, s))
			}
		}
	}
	check("the log", log)
	for i, rec := range recs {
		check(fmt.Sprintf("audit record %d", i), fmt.Sprintf("%+v", rec))
	}
	for i, s := range watched {
		check(fmt.Sprintf("answer %d", i), s)
	}
	return problems
}

// TestHygieneCheck makes sure the check the whole suite relies on sees a
// leak wherever it is.
func TestHygieneCheck(t *testing.T) {
	tok := broker.Token(make([]byte, 32), "c", 1)
	if p := hygieneProblems("", nil, nil); len(p) != 0 {
		t.Errorf("clean input: %v", p)
	}
	for name, in := range map[string]struct {
		log     string
		recs    []broker.AuditRecord
		watched []string
	}{
		"value in the log":   {log: `{"msg":"x","v":"a` + marker + `"}`},
		"token in the log":   {log: "Bearer " + tok},
		"value in an audit":  {recs: []broker.AuditRecord{{Name: "pw-" + marker}}},
		"value in an answer": {watched: []string{`{"error":"` + marker + `"}`}},
		"token in an answer": {watched: []string{tok}},
	} {
		if p := hygieneProblems(in.log, in.recs, in.watched); len(p) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

// copyTestBinary copies the test binary into a directory other users can
// reach (the original lives in a 0700 directory) and returns its path.
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "broker.test")
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// helperOpts marks git grants as served through the credential helper
// (--git-relay=false), for the tests of that route.
func helperOpts(names ...string) map[string]broker.GitOptions {
	m := map[string]broker.GitOptions{}
	for _, n := range names {
		m[n] = broker.GitOptions{Helper: true}
	}
	return m
}
