// Package enginepull stands in for a registry in tests: a Docker Engine
// API proxy on a Unix socket, in front of the real engine, that answers
// image pulls from the test instead of from a registry.
//
// Where no registry answers, a pull cannot be tested for real; everything
// around it can. The proxy forwards every Engine API request to the real
// engine unchanged (streams, hijacked exec connections and long polls
// included) except POST /images/create?fromImage=... (a pull): that one is
// handed to the test as a [Pull], whose messages the test sends one by one
// in the engine's own format (JSON messages, newline separated, each
// flushed), as slowly as it likes, and ends with [Pull.Close]. To make the
// pull succeed, the test tags an image the engine has with the pulled
// reference before it closes the stream, which is what a real pull leaves
// behind. A daemon under test gets the proxy's address as DOCKER_HOST: its
// code path is the release one.
//
// Start here: [Start].
package enginepull

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Proxy is a running proxy.
type Proxy struct {
	// Host is the proxy's address as DOCKER_HOST takes it (unix://...).
	Host string
	// Pulls receives every pull a client asks for, in order.
	Pulls <-chan *Pull

	pulls chan *Pull
}

// Pull is one pull request a client made through the proxy; its answer is
// what the test sends.
type Pull struct {
	// Image is the reference asked for: fromImage, then ":" and tag when
	// the request has one.
	Image string
	// Header is the request's header (X-Registry-Auth, when a client sent
	// credentials).
	Header http.Header

	msgs chan string
	done chan struct{} // closed when the handler has returned
}

// Send writes each message (one JSON value of the engine's pull stream,
// e.g. {"status":"Downloading","id":"a1b2c3","progressDetail":{...}}) to
// the client and flushes it; it returns once all are written.
func (p *Pull) Send(msgs ...string) {
	for _, m := range msgs {
		select {
		case p.msgs <- m:
		case <-p.done:
			return
		}
	}
}

// Close ends the pull's answer and waits for the handler to return.
func (p *Pull) Close() {
	close(p.msgs)
	<-p.done
}

// Start runs a proxy in front of the engine DOCKER_HOST names (a unix://
// or tcp:// address without TLS; default unix:///var/run/docker.sock),
// stopped when t ends.
func Start(t testing.TB) *Proxy {
	t.Helper()
	upstream := os.Getenv("DOCKER_HOST")
	if upstream == "" {
		upstream = "unix:///var/run/docker.sock"
	}
	network, addr, ok := strings.Cut(upstream, "://")
	if !ok || (network != "unix" && network != "tcp") || os.Getenv("DOCKER_TLS_VERIFY") != "" {
		t.Fatalf("enginepull: DOCKER_HOST %q: only unix:// and plain tcp:// engines can be proxied", upstream)
	}
	dir, err := os.MkdirTemp("", "enginepull-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Host: "unix://" + sock, pulls: make(chan *Pull, 16)}
	p.Pulls = p.pulls
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "docker"})
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
			DisableCompression: true,
		},
		FlushInterval: -1, // every write at once: event streams, logs, long polls
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/images/create") && r.URL.Query().Get("fromImage") != "" {
				p.servePull(w, r)
				return
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		_ = os.RemoveAll(dir)
	})
	return p
}

func (p *Proxy) servePull(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	img := q.Get("fromImage")
	if tag := q.Get("tag"); tag != "" {
		sep := ":"
		if strings.Contains(tag, ":") { // a digest
			sep = "@"
		}
		img += sep + tag
	}
	pull := &Pull{Image: img, Header: r.Header.Clone(), msgs: make(chan string), done: make(chan struct{})}
	defer close(pull.done)
	select {
	case p.pulls <- pull:
	default:
		http.Error(w, fmt.Sprintf(`{"message":"enginepull: %d pulls nobody took"}`, cap(p.pulls)), http.StatusInternalServerError)
		return
	}
	// The engine answers 200 at once and streams the progress after.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for {
		select {
		case m, ok := <-pull.msgs:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "%s\r\n", m); err != nil {
				return
			}
			_ = rc.Flush()
		case <-r.Context().Done():
			return
		}
	}
}
