package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/masterkey"
	"github.com/ohd-dev/ohd/pkg/store"
)

// BrokerOptions configure Broker. Zero fields take their defaults.
type BrokerOptions struct {
	// Duration is how long each server is driven in each mode, split over
	// Rounds alternating broker and baseline; default 4s.
	Duration time.Duration
	// Rounds is the number of broker/baseline alternations per mode (the
	// order flips every round), so a noisy moment on a shared machine hits
	// both; default 8.
	Rounds int
	// Clients is the number of concurrent clients of the parallel modes;
	// default 16.
	Clients int
	// Dir is where the sockets go; default a fresh temporary directory,
	// removed afterwards.
	Dir string
}

// Result is one mode's measurement: the broker's GET /v1/whoami against a
// plain net/http server answering a constant body on a Unix socket, with
// the same clients, in the same run.
type Result struct {
	Mode    string // "keepalive", "newconn", "keepalive-1client", "newconn-1client"
	Clients int
	// Requests per second and latency percentiles.
	BrokerRPS, BaselineRPS     float64
	BrokerP50, BrokerP99       time.Duration
	BaselineP50, BaselineP99   time.Duration
	Ratio                      float64 // BrokerRPS / BaselineRPS
	BrokerErrors, BaselineErrs int     // failed or non-200 requests (must be 0)
}

// Line is the one-line summary the harness prints:
//
//	bench: broker-<mode> ratio=<broker/baseline> p99=<broker p99>
func (r Result) Line() string {
	return fmt.Sprintf("bench: broker-%s ratio=%.2f p99=%v", r.Mode, r.Ratio, r.BrokerP99.Round(time.Microsecond))
}

// Detail is a longer, human-readable line with every figure.
func (r Result) Detail() string {
	return fmt.Sprintf("broker-%s clients=%d broker: %.0f rps p50=%v p99=%v | baseline: %.0f rps p50=%v p99=%v | ratio=%.2f p99-ratio=%.2f errors=%d/%d",
		r.Mode, r.Clients, r.BrokerRPS, r.BrokerP50.Round(time.Microsecond), r.BrokerP99.Round(time.Microsecond),
		r.BaselineRPS, r.BaselineP50.Round(time.Microsecond), r.BaselineP99.Round(time.Microsecond),
		r.Ratio, float64(r.BrokerP99)/float64(max(r.BaselineP99, 1)), r.BrokerErrors, r.BaselineErrs)
}

const brokerBenchConv = "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b"

// Broker starts a real Broker (in-memory backend answering from memory,
// audit records handed to a batching goroutine as ohd's store does) and a
// baseline server, and drives both with the same clients in four modes:
// Clients concurrent clients with keep-alive and with a new connection
// per request, and one client in each.
func Broker(ctx context.Context, opts BrokerOptions) ([]Result, error) {
	if opts.Duration <= 0 {
		opts.Duration = 4 * time.Second
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 8
	}
	if opts.Clients <= 0 {
		opts.Clients = 16
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ohdbench")
		if err != nil {
			return nil, fmt.Errorf("bench broker: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}

	be, err := newBrokerAuditBackend(dir)
	if err != nil {
		return nil, fmt.Errorf("bench broker: %w", err)
	}
	defer be.close()
	key := broker.DeriveKey([]byte("ohd bench master key"))
	b, err := broker.New(broker.Options{
		RuntimeDir: filepath.Join(dir, "run"),
		Key:        key,
		Backend:    be,
		Logger:     slog.New(slog.DiscardHandler),
		// The limits stay on (their cost is measured) but out of reach.
		Limits: broker.Limits{MaxInFlight: 4096, SecretInFlight: 4096, GitInFlight: 4096, LLMInFlight: 4096, OAuthInFlight: 4096, MaxConns: -1, Rate: 1e12, Burst: 1 << 30},
	})
	if err != nil {
		return nil, fmt.Errorf("bench broker: %w", err)
	}
	conv := broker.Conversation{
		ID: brokerBenchConv, UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{Secrets: []string{"a", "b"}, Git: []string{"github.com/acme"}, LLM: []string{"default"}},
	}
	ep, shutdown, err := openBenchConversation(ctx, b, be.SetConversation, conv)
	if err != nil {
		return nil, fmt.Errorf("bench broker: %w", err)
	}
	defer shutdown()

	// The baseline answers a constant body of the broker's length.
	probe, err := brokerGetOnce(ep.Socket, broker.Token(key, brokerBenchConv, 1))
	if err != nil {
		return nil, fmt.Errorf("bench broker: probe: %w", err)
	}
	baseSock := filepath.Join(dir, "baseline.sock")
	ln, err := net.Listen("unix", baseSock)
	if err != nil {
		return nil, fmt.Errorf("bench broker: baseline: %w", err)
	}
	baseSrv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(probe)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	var serveWG sync.WaitGroup
	serveWG.Go(func() { _ = baseSrv.Serve(ln) })
	defer func() {
		baseSrv.Close()
		serveWG.Wait()
	}()

	token := broker.Token(key, brokerBenchConv, 1)
	modes := []struct {
		name      string
		clients   int
		keepAlive bool
	}{
		{"keepalive", opts.Clients, true},
		{"newconn", opts.Clients, false},
		{"keepalive-1client", 1, true},
		{"newconn-1client", 1, false},
	}
	var results []Result
	for _, m := range modes {
		per := opts.Duration / time.Duration(opts.Rounds)
		var bs, ls sample
		// Warm both up (connections, goroutine stacks, caches).
		if _, err := brokerDrive(ctx, baseSock, token, m.clients, m.keepAlive, per/5); err != nil {
			return nil, err
		}
		if _, err := brokerDrive(ctx, ep.Socket, token, m.clients, m.keepAlive, per/5); err != nil {
			return nil, err
		}
		for round := range opts.Rounds {
			order := []struct {
				socket string
				into   *sample
			}{{baseSock, &ls}, {ep.Socket, &bs}}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, o := range order {
				s, err := brokerDrive(ctx, o.socket, token, m.clients, m.keepAlive, per)
				if err != nil {
					return nil, err
				}
				o.into.add(s)
			}
		}
		r := Result{
			Mode: m.name, Clients: m.clients,
			BrokerRPS: bs.rate(), BaselineRPS: ls.rate(),
			BrokerErrors: bs.errors, BaselineErrs: ls.errors,
		}
		r.BrokerP50, r.BrokerP99 = bs.percentile(0.50), bs.percentile(0.99)
		r.BaselineP50, r.BaselineP99 = ls.percentile(0.50), ls.percentile(0.99)
		if r.BaselineRPS > 0 {
			r.Ratio = r.BrokerRPS / r.BaselineRPS
		}
		results = append(results, r)
	}
	return results, nil
}

func brokerClient(socket string, keepAlive bool, clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: clients,
		DisableCompression:  true,
	}}
}

// brokerDrive runs clients goroutines, each sending GET /v1/whoami in a loop for
// d, and returns every latency.
func brokerDrive(ctx context.Context, socket, token string, clients int, keepAlive bool, d time.Duration) (sample, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://ohd-broker/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-OHD-Request", "1")
	return driveHTTP(ctx, "broker", brokerClient(socket, keepAlive, clients), req, clients, d)
}

func brokerGetOnce(socket, token string) ([]byte, error) {
	hc := brokerClient(socket, false, 1)
	req, _ := http.NewRequest(http.MethodGet, "http://ohd-broker/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-OHD-Request", "1")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("whoami: %d %s", resp.StatusCode, b)
	}
	return b, nil
}

// brokerAuditBackend is the in-memory backend with Audit as ohd serve
// does it: conversation.Backend's, into a real store (bbolt file, batched
// writer).
type brokerAuditBackend struct {
	*brokertest.Backend
	st *store.Store
}

func newBrokerAuditBackend(dir string) (*brokerAuditBackend, error) {
	key, err := masterkey.New(bytes.Repeat([]byte{7}, masterkey.Size))
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(dir, store.FileName), key, store.Options{})
	if err != nil {
		return nil, err
	}
	return &brokerAuditBackend{Backend: brokertest.New(), st: st}, nil
}

func (b *brokerAuditBackend) Audit(rec broker.AuditRecord) {
	conversation.Backend{Store: b.st}.Audit(rec)
}

func (b *brokerAuditBackend) AuditErr() error { return b.st.AuditErr() }

func (b *brokerAuditBackend) close() { b.st.Close() }

// openBenchConversation registers conv with its backend (setConv), opens
// its broker socket and returns the endpoint and a func that shuts the
// broker down: the set-up every broker-backed bench shares.
func openBenchConversation(ctx context.Context, b *broker.Broker, setConv func(broker.Conversation), conv broker.Conversation) (broker.Endpoint, func(), error) {
	setConv(conv)
	ep, err := b.Open(ctx, conv)
	if err != nil {
		return ep, func() {}, err
	}
	return ep, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(sctx)
	}, nil
}
