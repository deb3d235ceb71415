package ohctl

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/control"
)

// TestCreateShowsPull runs ohctl create against a daemon whose create
// waits for an image pull, and checks each step of the pull reaches
// ohctl's standard error while the create still waits.
func TestCreateShowsPull(t *testing.T) {
	var mu sync.Mutex
	var pulls []control.Pull
	setPulls := func(p ...control.Pull) { mu.Lock(); pulls = p; mu.Unlock() }
	release := make(chan struct{})
	convs, _, _ := fixtures()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pulls", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(append([]control.Pull{}, pulls...))
	})
	mux.HandleFunc("POST /v1/conversations", func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(convs[0])
	})
	dir, err := os.MkdirTemp("", "ohctl-pull-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ohd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	var stdout, stderr testenv.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(context.Background(), []string{"ohctl", "--socket", sock, "create", "--repo", "/home/ana/src/shop", "--worktree"}, Env{
			Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" },
		})
	}()
	wait := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(stderr.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("ohctl create's stderr has no %q:\n%s", what, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const img = "ghcr.io/openhands/agent-server:1.54.0-python"
	started := time.Now()
	setPulls(control.Pull{Image: img, Started: started, Status: "Pulling from openhands/agent-server", Layers: []control.PullLayer{
		{ID: "a2318d6c47ec", Status: "Downloading", Downloaded: 1 << 20, Size: 4 << 20},
		{ID: "5d4f2e9a1b7c", Status: "Waiting"},
	}})
	wait("ohctl: the Docker engine does not have image " + img + ": ohd is pulling it, the create waits\n" +
		"ohctl: pulling " + img + ": 0 of 2 layers done, 1.0 MiB of 4.0 MiB downloaded [Pulling from openhands/agent-server]\n")
	setPulls(control.Pull{Image: img, Started: started, Status: "Pulling from openhands/agent-server", Layers: []control.PullLayer{
		{ID: "a2318d6c47ec", Status: "Pull complete", Downloaded: 4 << 20, Size: 4 << 20, Done: true},
		{ID: "5d4f2e9a1b7c", Status: "Downloading", Downloaded: 1 << 20, Size: 2 << 20},
	}})
	wait(": 1 of 2 layers done, 5.0 MiB of 6.0 MiB downloaded")
	select {
	case c := <-code:
		t.Fatalf("ohctl create exited %d before the create answered", c)
	default:
	}
	setPulls()
	close(release)
	if c := <-code; c != 0 {
		t.Fatalf("ohctl create exit %d, stderr:\n%s", c, stderr.String())
	}
	if !strings.Contains(stdout.String(), convs[0].ID) {
		t.Errorf("ohctl create stdout = %q, want the conversation", stdout.String())
	}
	if n := strings.Count(stderr.String(), "ohctl: pulling "); n != 2 {
		t.Errorf("ohctl create printed %d progress lines, want 2 (one per state):\n%s", n, stderr.String())
	}
}
