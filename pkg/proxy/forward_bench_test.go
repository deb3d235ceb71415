package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The forwarding benchmarks measure ohd's own cost per proxied request
// (the hot path: a bodiless GET of a running conversation's route) against
// an inner server that costs next to nothing: a raw HTTP/1.1 loop that
// answers every request head with the same bytes. Run them with -benchmem:
// allocations per request are the figure a change to the path should not
// raise (the README's performance section has the numbers).
//
//	go test -run '^$' -bench 'Forward' -benchmem ./pkg/proxy

// benchConvID is the one conversation of the benchmarks.
const benchConvID = "01234567-89ab-4cde-8f01-23456789abcd"

// benchConversations knows one running conversation at addr.
type benchConversations struct {
	addr string
	key  []byte
}

func (c *benchConversations) conv() store.Conversation {
	return store.Conversation{ID: benchConvID, State: store.StateRunning, Runtime: "docker", WorkingDir: "/", Workspace: "/"}
}

func (c *benchConversations) Create(context.Context, conversation.CreateRequest) (store.Conversation, error) {
	return store.Conversation{}, conversation.ErrInvalid
}

func (c *benchConversations) Get(id string) (store.Conversation, error) {
	if id != benchConvID {
		return store.Conversation{}, conversation.ErrNotFound
	}
	return c.conv(), nil
}

func (c *benchConversations) List() []store.Conversation { return []store.Conversation{c.conv()} }

func (c *benchConversations) Target(_ context.Context, id string) (conversation.Target, error) {
	if id != benchConvID {
		return conversation.Target{}, conversation.ErrNotFound
	}
	return conversation.Target{Addr: c.addr, InnerKey: c.key}, nil
}

func (c *benchConversations) Remove(context.Context, string, conversation.RemoveOptions) (store.Conversation, error) {
	return store.Conversation{}, conversation.ErrConflict
}

func (c *benchConversations) Touch(string) {}

func (c *benchConversations) InnerInfo(string) (json.RawMessage, error) {
	return nil, openhands.ErrNoState
}

// benchInnerBody is what the raw inner server answers (the size of a
// small JSON answer of the agent server's).
var benchInnerBody = bytes.Repeat([]byte("x"), 64)

// startRawInner starts the raw inner server: every request head (no
// bodies: the benchmarks send GETs) is answered with 200 and
// benchInnerBody, on keep-alive connections. It returns its address.
func startRawInner(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(benchInnerBody)) + "\r\n\r\n" + string(benchInnerBody))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReaderSize(c, 8<<10)
				for {
					// A head ends with an empty line.
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			})
		}
	})
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// newBenchServer returns a Server in front of the raw inner server.
func newBenchServer(tb testing.TB) *Server {
	s, err := New(Options{
		Conversations: &benchConversations{addr: startRawInner(tb), key: []byte("inner-key-0123456789abcdef")},
		Keys:          [][]byte{[]byte(outerKeys[0])},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.inner.CloseIdleConnections)
	return s
}

// discardWriter is a ResponseWriter that keeps the status and drops the
// body: the handler's cost without a client connection's.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkForwardHandler is ohd's handler alone for one forwarded GET:
// routing, authentication, the target, the request head written to a
// pooled inner connection, the answer read, scrubbed and copied.
func BenchmarkForwardHandler(b *testing.B) {
	s := newBenchServer(b)
	req, err := http.NewRequest(http.MethodGet, "/api/conversations/"+benchConvID+"/events/search?limit=1", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Body = http.NoBody // as the server gives a GET
	req.Host = "127.0.0.1:8000"
	req.RequestURI = req.URL.RequestURI()
	req.Header.Set("X-Session-API-Key", outerKeys[0])
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "bench")
	w := &discardWriter{}
	b.ReportAllocs()
	for b.Loop() {
		w.h, w.code, w.n = http.Header{}, 0, 0
		s.serveHTTP(w, req)
		if w.code != http.StatusOK || w.n != len(benchInnerBody) {
			b.Fatalf("answer %d with %d bytes, want 200 with %d", w.code, w.n, len(benchInnerBody))
		}
	}
}

// BenchmarkForwardServer is the same through ohd's HTTP server on
// loopback TCP, with raw keep-alive clients (one per parallel goroutine)
// that write a request and read the answer: what a request costs ohd as
// deployed, the server's parsing and the client socket included (the
// clients' own cost is in it too, but they allocate nothing per request).
func BenchmarkForwardServer(b *testing.B) {
	s := newBenchServer(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(ctx, ln) })
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	reqBytes := []byte("GET /api/conversations/" + benchConvID + "/events/search?limit=1 HTTP/1.1\r\nHost: " +
		ln.Addr().String() + "\r\nX-Session-API-Key: " + outerKeys[0] + "\r\nAccept: application/json\r\nUser-Agent: bench\r\n\r\n")
	b.ReportAllocs()
	b.SetParallelism(2) // 2×GOMAXPROCS clients
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReaderSize(c, 8<<10)
		for pb.Next() {
			if _, err := c.Write(reqBytes); err != nil {
				b.Error(err)
				return
			}
			if err := readRawAnswer(br); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// readRawAnswer reads one answer with a Content-Length body and checks its
// status is 200.
func readRawAnswer(br *bufio.Reader) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return &benchError{"status line " + strconv.Quote(string(line))}
	}
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n < 0 {
		return &benchError{"answer without Content-Length"}
	}
	_, err = br.Discard(n)
	return err
}

type benchError struct{ s string }

func (e *benchError) Error() string { return e.s }
