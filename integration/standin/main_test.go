package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr bool
	}{
		{"defaults", nil, Config{Addr: "0.0.0.0:8000", Runtime: "local", ConversationsPath: "workspace/conversations", BashEventsDir: "workspace/bash_events", LeaseTTL: 45 * time.Second, VSCode: true}, false},
		{"everything", map[string]string{
			"STANDIN_ADDR":            "127.0.0.1:9",
			"OH_SESSION_API_KEYS_0":   "k0",
			"OH_SESSION_API_KEYS_1":   "k1",
			"OH_SESSION_API_KEYS_3":   "not read: _2 is missing",
			"OHD_CONVERSATION_ID":     "6F9619FF8B86D011B42D00C04FC964FF",
			"OH_CONVERSATION_RUNTIME": "docker",
			"STANDIN_HEALTH_DELAY":    "2s",
			"STANDIN_EXIT_AFTER":      "1s",
			"STANDIN_ANY_ID":          "1",
			"OH_CONVERSATIONS_PATH":   "/c",
			"OH_BASH_EVENTS_DIR":      "/b",
			"OH_LEASE_TTL_SECONDS":    "0",
			"OH_ENABLE_VNC":           "true",
			"OH_ENABLE_VSCODE":        "False",
			"OH_VSCODE_BASE_PATH":     "/v",
		}, Config{
			Desktop: true, VSCodeBasePath: "/v",
			Addr: "127.0.0.1:9", Keys: []string{"k0", "k1"}, ConversationsPath: "/c", BashEventsDir: "/b", SecretKey: "k0",
			ConversationID: "6f9619ff-8b86-d011-b42d-00c04fc964ff", Runtime: "docker",
			HealthDelay: 2 * time.Second, ExitAfter: time.Second, AnyID: true,
		}, false},
		{"bad delay", map[string]string{"STANDIN_HEALTH_DELAY": "soon"}, Config{}, true},
		{"negative exit", map[string]string{"STANDIN_EXIT_AFTER": "-1s"}, Config{}, true},
		{"bad conversation id", map[string]string{"OHD_CONVERSATION_ID": "x"}, Config{}, true},
		{"bad any id", map[string]string{"STANDIN_ANY_ID": "yes please"}, Config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := configFromEnv(env(tt.env))
			if tt.wantErr {
				if !errors.Is(err, errConfig) {
					t.Fatalf("configFromEnv(%v) error = %v, want errConfig", tt.env, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("configFromEnv(%v) (-want +got):\n%s", tt.env, diff)
			}
		})
	}
}

func TestRunExitAfter(t *testing.T) {
	var stderr testenv.SyncBuffer
	code := run(context.Background(), []string{"standin"}, env(map[string]string{
		"STANDIN_ADDR":          "127.0.0.1:0",
		"STANDIN_EXIT_AFTER":    "50ms",
		"OH_CONVERSATIONS_PATH": t.TempDir(),
	}), &stderr)
	if code != exitCrash {
		t.Errorf("run with STANDIN_EXIT_AFTER = %d, want %d", code, exitCrash)
	}
	if !strings.Contains(stderr.String(), "simulated crash: exiting with status 3") {
		t.Errorf("stderr lacks the crash line:\n%s", stderr.String())
	}
}

func TestRunBadConfig(t *testing.T) {
	var stderr testenv.SyncBuffer
	if code := run(context.Background(), []string{"standin"}, env(map[string]string{"STANDIN_EXIT_AFTER": "x"}), &stderr); code != 2 {
		t.Errorf("run with a bad STANDIN_EXIT_AFTER = %d, want 2", code)
	}
	if code := run(context.Background(), []string{"standin", "extra"}, env(nil), &stderr); code != 2 {
		t.Errorf("run with an argument = %d, want 2", code)
	}
}

// TestBinarySIGTERM runs the real binary and checks it answers and stops
// promptly on SIGTERM, as a container's PID 1 must.
func TestBinarySIGTERM(t *testing.T) {
	bin := testenv.GoBuild(t, "./integration/standin", "CGO_ENABLED=0")
	cmd := exec.Command(bin)
	cmd.Env = []string{"STANDIN_ADDR=127.0.0.1:0", "OH_SESSION_API_KEYS_0=" + testKey, "OH_CONVERSATIONS_PATH=" + t.TempDir()}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The first log line names the address.
	sc := bufio.NewScanner(stderr)
	addrRE := regexp.MustCompile(`addr=(\S+)`)
	var addr string
	for addr == "" && sc.Scan() {
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil && strings.Contains(sc.Text(), "listening") {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no listening line on stderr (%v)", sc.Err())
	}
	drained := make(chan string)
	go func() {
		b, _ := io.ReadAll(stderr)
		drained <- string(b)
	}()

	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /health = %d", resp.StatusCode)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logs := <-drained
	err = cmd.Wait()
	if err != nil {
		t.Errorf("standin after SIGTERM: %v, want exit status 0\n%s", err, logs)
	}
	// Generous bound: the promise is "well under a second"; a loaded CI
	// machine must not make this flaky.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("standin took %s to stop after SIGTERM", d)
	}
	if strings.Contains(logs, testKey) {
		t.Errorf("the log contains the session key:\n%s", logs)
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		keys    []string
		want    string
		wantErr bool
	}{
		{nil, nil, "127.0.0.1:8000", false},         // no key: loopback (__main__.py)
		{nil, []string{"k"}, "0.0.0.0:8000", false}, // a key: all interfaces
		{[]string{"--host", "0.0.0.0", "--port", "8000"}, nil, "0.0.0.0:8000", false},
		{[]string{"--port=9001"}, []string{"k"}, "0.0.0.0:9001", false},
		{[]string{"--port", "x"}, nil, "", true},
		{[]string{"--host"}, nil, "", true},
		{[]string{"serve"}, nil, "", true},
	}
	for _, tt := range tests {
		c := Config{Keys: tt.keys}
		err := c.parseArgs(tt.args, false)
		if (err != nil) != tt.wantErr || (!tt.wantErr && c.Addr != tt.want) {
			t.Errorf("parseArgs(%q) = %q, %v; want %q (error %v)", tt.args, c.Addr, err, tt.want, tt.wantErr)
		}
	}
}

// TestRunExitsWithoutConversationsDir is the agent server's start-up
// failure (reference §6): a conversations directory it cannot create
// fails the lifespan, and the process exits before listening.
func TestRunExitsWithoutConversationsDir(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr testenv.SyncBuffer
	code := run(context.Background(), []string{"standin"}, env(map[string]string{
		"STANDIN_ADDR":          "127.0.0.1:0",
		"OH_CONVERSATIONS_PATH": filepath.Join(blocker, "conversations"),
	}), &stderr)
	if code != exitStartup || !strings.Contains(stderr.String(), "Application startup failed") || strings.Contains(stderr.String(), "listening") {
		t.Errorf("run with an uncreatable conversations dir = %d, stderr:\n%s\nwant %d, a startup failure and no listener", code, stderr.String(), exitStartup)
	}
}
