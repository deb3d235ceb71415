package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/internal/gitserver"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
)

// GitRelayOptions configure the git relay benchmark. Zero fields take the
// defaults.
type GitRelayOptions struct {
	// Size is the repository's size, in incompressible blobs; default 200
	// MiB.
	Size int64
	// Push is the size of each push's new blob; default 50 MiB.
	Push int64
	// Rounds of each operation on each side (alternating); default 3.
	Rounds int
}

// GitRelayResult is one operation of the git relay benchmark: git
// through the broker relay and the broker's credential-injecting forward
// (what git in a container uses) against git reaching the same git
// http-backend directly with the credential, medians of Rounds.
type GitRelayResult struct {
	Op             string // "clone" or "push"
	Bytes          int64
	Relay, Direct  time.Duration
	RelayS, DirecS []time.Duration
}

// Ratio is the relay's throughput against the direct path's.
func (r GitRelayResult) Ratio() float64 { return float64(r.Direct) / float64(r.Relay) }

// Line is the result as one "bench:" line.
func (r GitRelayResult) Line() string {
	return fmt.Sprintf("bench: gitrelay-%s mib=%d relay_s=%.2f direct_s=%.2f ratio=%.2f", r.Op, r.Bytes>>20, r.Relay.Seconds(), r.Direct.Seconds(), r.Ratio())
}

// Detail says what was measured.
func (r GitRelayResult) Detail() string {
	what := "git clone --bare of a repository of %d MiB of random blobs"
	if r.Op == "push" {
		what = "git push of a new commit holding a %d MiB random blob"
	}
	return fmt.Sprintf("gitrelay-%s: "+what+", through the broker relay and the broker's git forward (credential injected) vs git directly against the same git http-backend on loopback; medians of %d: relay %s, direct %s",
		r.Op, r.Bytes>>20, len(r.RelayS), r.Relay.Round(time.Millisecond), r.Direct.Round(time.Millisecond))
}

// GitRelayRows are the table rows of the git relay benchmark.
func GitRelayRows(rs []GitRelayResult) []Row {
	var out []Row
	for _, r := range rs {
		mibps := func(d time.Duration) string { return fmt.Sprintf("%.0f MiB/s", float64(r.Bytes>>20)/d.Seconds()) }
		out = append(out, row("gitrelay-"+r.Op, mibps(r.Relay), mibps(r.Direct), r.Ratio()))
	}
	return out
}

const gitBenchToken = "ghs-bench-token"

// GitRelay measures a clone and a push through the git relay against the
// same done directly.
func GitRelay(ctx context.Context, opts GitRelayOptions) ([]GitRelayResult, error) {
	if opts.Size <= 0 {
		opts.Size = 200 << 20
	}
	if opts.Push <= 0 {
		opts.Push = 50 << 20
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 3
	}
	dir, err := os.MkdirTemp("", "ohd-gitbench")
	if err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	defer os.RemoveAll(dir)
	srv, err := gitserver.New(filepath.Join(dir, "srv"), gitserver.Options{Username: "x-access-token", Token: gitBenchToken})
	if err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	defer srv.Close()
	if err := os.MkdirAll(srv.Root, 0o755); err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	bare, err := srv.NewRepo("bench/big.git")
	if err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	work := filepath.Join(dir, "work")
	if err := seedBig(work, bare, opts.Size); err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}

	be := brokertest.New()
	be.DiscardAudit()
	be.SetGitCredential(srv.Host, broker.GitCredential{Username: "x-access-token", Password: []byte(gitBenchToken), Scheme: "http"})
	b, err := broker.New(broker.Options{
		RuntimeDir: filepath.Join(dir, "run"), Key: broker.DeriveKey([]byte("ohd gitrelay bench master key")),
		Backend: be, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	conv := broker.Conversation{ID: "gitbench", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Git: []string{srv.Host}}}
	ep, shutdown, err := openBenchConversation(ctx, b, be.SetConversation, conv)
	if err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	defer shutdown()
	bc := broker.NewClient(ep.Socket, ep.TokenFile)
	defer bc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench gitrelay: %w", err)
	}
	rl := broker.NewRelay(bc)
	// The relay answers Host 127.0.0.1:8751 only, as inside a container.
	relay := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = broker.RelayAddr
		rl.ServeHTTP(w, r)
	})}
	go func() { _ = relay.Serve(ln) }()
	defer relay.Close()

	remote := "http://" + srv.Host + "/bench/big.git"
	relayEnv := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url.http://" + ln.Addr().String() + "/git/" + srv.Host + "/.insteadOf", "GIT_CONFIG_VALUE_0=http://" + srv.Host + "/"}
	directEnv := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gitBenchToken))}

	clone := GitRelayResult{Op: "clone", Bytes: opts.Size}
	push := GitRelayResult{Op: "push", Bytes: opts.Push}
	for i := range opts.Rounds {
		for _, side := range []struct {
			env []string
			s   *[]time.Duration
		}{{relayEnv, &clone.RelayS}, {directEnv, &clone.DirecS}} {
			dst := filepath.Join(dir, fmt.Sprintf("clone-%d", i))
			d, err := timeGit(ctx, dir, side.env, "clone", "-q", "--bare", remote, dst)
			if err != nil {
				return nil, fmt.Errorf("bench gitrelay clone: %w", err)
			}
			*side.s = append(*side.s, d)
			_ = os.RemoveAll(dst)
		}
	}
	for i := range opts.Rounds {
		for j, side := range []struct {
			env []string
			s   *[]time.Duration
		}{{relayEnv, &push.RelayS}, {directEnv, &push.DirecS}} {
			if err := commitBlob(work, opts.Push, fmt.Sprintf("push-%d-%d", i, j)); err != nil {
				return nil, fmt.Errorf("bench gitrelay push: %w", err)
			}
			ref := fmt.Sprintf("HEAD:refs/heads/openhands/bench-%d-%d", i, j)
			d, err := timeGit(ctx, work, side.env, "push", "-q", remote, ref)
			if err != nil {
				return nil, fmt.Errorf("bench gitrelay push: %w", err)
			}
			*side.s = append(*side.s, d)
		}
	}
	for _, r := range []*GitRelayResult{&clone, &push} {
		r.Relay, r.Direct = median(r.RelayS), median(r.DirecS)
	}
	return []GitRelayResult{clone, push}, nil
}

func timeGit(ctx context.Context, dir string, env []string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.com", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.com"), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return time.Since(start), nil
}

// seedBig makes a work repository of size bytes of random 8 MiB blobs,
// stored uncompressed (they cannot shrink), pushes it to bare and packs
// bare, so a clone streams the pack as it is.
func seedBig(work, bare string, size int64) error {
	if _, err := gitserver.Run("", "init", "-q", "-b", "main", work); err != nil {
		return err
	}
	for _, kv := range [][2]string{{"core.compression", "0"}, {"pack.compression", "0"}} {
		if _, err := gitserver.Run(work, "config", kv[0], kv[1]); err != nil {
			return err
		}
		if _, err := gitserver.Run(bare, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	const blob = 8 << 20
	for i := int64(0); i*blob < size; i++ {
		if err := randomFile(filepath.Join(work, fmt.Sprintf("blob-%03d.bin", i)), min(blob, size-i*blob)); err != nil {
			return err
		}
	}
	if _, err := gitserver.Run(work, "add", "."); err != nil {
		return err
	}
	if _, err := gitserver.Run(work, "commit", "-q", "-m", "big"); err != nil {
		return err
	}
	if _, err := gitserver.Run(work, "push", "-q", bare, "main"); err != nil {
		return err
	}
	_, err := gitserver.Run(bare, "repack", "-a", "-d", "-q")
	return err
}

func commitBlob(work string, size int64, name string) error {
	if err := randomFile(filepath.Join(work, name+".bin"), size); err != nil {
		return err
	}
	if _, err := gitserver.Run(work, "add", name+".bin"); err != nil {
		return err
	}
	_, err := gitserver.Run(work, "commit", "-q", "-m", name)
	return err
}

func randomFile(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
