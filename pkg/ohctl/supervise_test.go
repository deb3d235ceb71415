package ohctl

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// TestSuperviseInnerServesRelayAndKeepsExitStatus runs a child that
// asks the relay for a secret while it runs, then exits 3: the relay
// answers (the broker socket does not exist here: 502 from the relay
// itself), and inner-exec exits with the child's status.
func TestSuperviseInnerServesRelayAndKeepsExitStatus(t *testing.T) {
	dir := t.TempDir()
	getenv := func(k string) string {
		switch k {
		case broker.EnvSocket:
			return filepath.Join(dir, "absent.sock")
		case broker.EnvTokenFile:
			return filepath.Join(dir, "token")
		}
		return ""
	}
	type res struct {
		code int
		body string
	}
	got := make(chan res, 1)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			resp, err := http.Get("http://" + broker.RelayAddr + "/secrets/X")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got <- res{resp.StatusCode, string(b)}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		got <- res{}
	}()
	var stderr strings.Builder
	err := superviseInner(context.Background(), "/bin/sh", []string{"sh", "-c", "sleep 1; exit 3"}, nil, getenv, &stderr)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Errorf("superviseInner = %v, want exit status 3", err)
	}
	r := <-got
	if r.code != http.StatusBadGateway || !strings.Contains(r.body, "bad_gateway") {
		t.Errorf("relay while the child ran = %d %q, want the relay's 502 (no broker here)", r.code, r.body)
	}
	if err := superviseInner(context.Background(), "/bin/sh", []string{"sh", "-c", "kill -TERM $$"}, nil, getenv, &stderr); !errors.As(err, &ee) || ee.code != 128+15 {
		t.Errorf("child killed by SIGTERM: superviseInner = %v, want exit status 143", err)
	}
}
