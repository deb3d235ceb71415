package broker_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// pieceReader yields n bytes in reads of at most piece bytes, as curl
// hands git's pack to the relay.
type pieceReader struct{ n, piece int }

func (p *pieceReader) Read(b []byte) (int, error) {
	if p.n == 0 {
		return 0, io.EOF
	}
	k := min(len(b), p.n, p.piece)
	clear(b[:k])
	p.n -= k
	return k, nil
}

// BenchmarkGitRelayPush pushes a 16 MiB pack through the in-container
// relay (TCP loopback), the broker's socket and the broker's git relay to
// a host that reads and discards it: the relay's own cost, chunked as
// git sends a large push. Compare its CPU profile and syscalls, not the
// wall clock of a loaded machine.
func BenchmarkGitRelayPush(b *testing.B) {
	const size = 16 << 20
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	}))
	b.Cleanup(host.Close)
	hostAddr := strings.TrimPrefix(host.URL, "http://")
	ep, _ := newBenchBrokerGit(b, hostAddr)
	bc := broker.NewClient(ep.Socket, ep.TokenFile)
	b.Cleanup(bc.Close)
	rl := broker.NewRelay(bc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = broker.RelayAddr
		rl.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close() })
	sha := strings.Repeat("1", 40)
	line := fmt.Sprintf("%s %s refs/heads/openhands/%s\x00 agent=bench\n", sha, strings.Repeat("2", 40), benchConvID)
	cmds := fmt.Sprintf("%04x%s0000", len(line)+4, line)
	u := "http://" + ln.Addr().String() + "/git/" + hostAddr + "/acme/x.git/git-receive-pack"
	hc := &http.Client{Transport: &http.Transport{}}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", u, io.MultiReader(strings.NewReader(cmds), &pieceReader{n: size, piece: 64 << 10}))
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("push: %d %s", resp.StatusCode, body)
		}
	}
}
