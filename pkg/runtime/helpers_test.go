package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// newUUID returns a random UUID (version 4).
func newUUID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// tlog is a slog handler target that writes to t.Log while t runs.
type tlog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tlog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &tlog{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testDocker connects to the engine (the test stops if there is none) and
// returns the runtime and a fresh server id whose containers are all
// force-removed when t ends.
func testDocker(t testing.TB) (*Docker, string) {
	t.Helper()
	testenv.RequireDocker(t)
	ctx := context.Background()
	d, err := NewDocker(ctx, DockerOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("NewDocker: %v", err)
	}
	server := "test-" + strings.ReplaceAll(newUUID(t), "-", "")[:16]
	t.Cleanup(func() {
		removeServer(t, server)
		d.Close()
	})
	return d, server
}

// removeServer force-removes every container labelled with server, with a
// client of its own (the runtime may be closed).
func removeServer(t testing.TB, server string) {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelServer+"="+server)})
	if err != nil {
		t.Errorf("cleanup: list containers of %s: %v", server, err)
		return
	}
	for _, it := range res.Items {
		if _, err := c.ContainerRemove(ctx, it.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			t.Errorf("cleanup: remove %s: %v", it.ID, err)
		}
	}
}

// standinEnv lets the test image's stand-in run as an unprivileged uid
// with no session key: like the real agent server it would otherwise
// bind 127.0.0.1 and fail to create /workspace/conversations.
var standinEnv = []string{"STANDIN_ADDR=0.0.0.0:8000", "OH_CONVERSATIONS_PATH=/tmp/conversations"}

// baseSpec is a small, quick container of server running the test image.
func baseSpec(t testing.TB, server string) Spec {
	return Spec{
		Env:            slices.Clone(standinEnv),
		ConversationID: newUUID(t),
		ServerID:       server,
		Image:          testimage.Ensure(t),
		UID:            testenv.UnprivilegedUID,
		GID:            testenv.UnprivilegedGID,
		Resources:      Resources{MemoryBytes: 64 << 20, NanoCPUs: 500_000_000, PidsLimit: 64},
		ReadyTimeout:   30 * time.Second,
	}
}

// rawClient is a plain engine client for the checks a test makes behind
// the runtime's back.
func rawClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustStart(t testing.TB, d *Docker, s Spec) Instance {
	t.Helper()
	inst, err := d.Start(context.Background(), s)
	if err != nil {
		t.Fatalf("Start(%s): %v", s.ConversationID, err)
	}
	return inst
}

// shUIDGID is a /bin/sh script (the test image has no id(1)) printing the
// real uid and gid of the shell.
const shUIDGID = `while read -r k a rest; do case $k in Uid:|Gid:) echo "$a";; esac; done < /proc/self/status`

// followEvents runs d.Events for server until the test ends and returns
// the events it delivers; Events must then return nil.
func followEvents(t testing.TB, d *Docker, server string) <-chan Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Event, 100)
	done := make(chan error, 1)
	go func() { done <- d.Events(ctx, server, func(e Event) { got <- e }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Events returned %v after its context ended, want nil", err)
		}
	})
	return got
}

// dockerCmd is exec.Command("docker", args...) with a deadline: a test
// never waits for ever on an engine that is wedged or loaded.
func dockerCmd(args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	time.AfterFunc(5*time.Minute, cancel) // released at its deadline
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}
