package ohctl

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
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

// TestSuperviseInnerTermsOnceOnCancel: once ctx is cancelled (ohctl's
// SIGTERM), the child gets one SIGTERM and inner-exec waits for it to
// exit; a child that traps TERM and finishes its work first must see it
// once, not a stream of them from a loop spinning on the closed Done
// channel. The child exits with the number of TERMs it trapped.
func TestSuperviseInnerTermsOnceOnCancel(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	getenv := func(k string) string {
		switch k {
		case broker.EnvSocket:
			return filepath.Join(dir, "absent.sock")
		case broker.EnvTokenFile:
			return filepath.Join(dir, "token")
		}
		return ""
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, err := os.Stat(ready); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// The child waits for the first TERM, then works a little longer; the
	// trap runs between commands, so each short sleep gives a resent TERM
	// a chance to be counted.
	script := `n=0; trap 'n=$((n+1))' TERM; : > "$1"; while [ $n -eq 0 ]; do sleep 0.02; done; i=0; while [ $i -lt 20 ]; do sleep 0.02; i=$((i+1)); done; exit $n`
	var stderr strings.Builder
	err := superviseInner(ctx, "/bin/sh", []string{"sh", "-c", script, "sh", ready}, nil, getenv, &stderr)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Errorf("superviseInner = %v (stderr %q), want the child to exit 1: it trapped exactly one SIGTERM", err, stderr.String())
	}
}
