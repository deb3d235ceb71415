package proxy

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/conversation"
)

// routeObserver records ObserveRequest calls.
type routeObserver struct {
	mu    sync.Mutex
	calls []string
}

func (o *routeObserver) ObserveRequest(route string, status int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, route+" "+itoa3(status))
}

func (o *routeObserver) WebSocketOpened()                   {}
func (o *routeObserver) WebSocketClosed(int, time.Duration) {}

// take returns the calls so far once there are n (the lean path reports
// a request after its answer is written, so a client may read it first),
// or after a second.
func (o *routeObserver) take(n int) []string {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		o.mu.Lock()
		if len(o.calls) >= n || time.Now().After(deadline) {
			c := o.calls
			o.calls = nil
			o.mu.Unlock()
			return c
		}
		o.mu.Unlock()
	}
}

func itoa3(n int) string {
	return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
}

// TestLeanPathReportsEveryRequest: a request the lean path answers is
// counted for the metrics as the old path counts it (route "forward", the
// status answered), a plain answer, one through leanWriter and an error
// alike, and a request handed to net/http is counted once, not twice.
func TestLeanPathReportsEveryRequest(t *testing.T) {
	in := startRawAnswers(t)
	convs := &leanConvs{addr: in.addr}
	obs := &routeObserver{}
	_, addr, marks, _ := startFront(t, convs, func(o *Options) { o.Observer = obs })
	c, br := dialFront(t, addr)
	conv := "/api/conversations/" + leanConvID
	roundTrips(t, c, br, leanGet(conv+"/events/1"), "GET")
	roundTrips(t, c, br, leanGet(conv+"/chunked/x"), "GET")
	if marks.handedOff(t, c) {
		t.Fatal("the front handed off a connection that sent only lean requests: the test would not try the lean path")
	}
	got := obs.take(2)
	want := []string{"forward 200", "forward 200"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("observed %v on the lean path, want %v", got, want)
	}
	// Handed off: net/http's path counts it (once).
	roundTrips(t, c, br, "POST "+conv+"/events/post HTTP/1.1\r\nHost: h\r\nX-Session-API-Key: "+outerKeys[0]+"\r\nContent-Length: 3\r\n\r\nabc", "POST")
	if got := obs.take(1); len(got) != 1 || got[0] != "forward 200" {
		t.Errorf("observed %v for a handed-off POST, want [forward 200]", got)
	}
}

// panickyConvs panics in Target for one conversation: a bug on the lean
// path's way.
type panickyConvs struct{ *leanConvs }

func (c panickyConvs) Target(ctx context.Context, id string) (conversation.Target, error) {
	if id == leanConflictID {
		panic("a bug on the lean path")
	}
	return c.leanConvs.Target(ctx, id)
}

// TestLeanPathPanicCostsOnlyItsConnection: a panic while the lean path
// answers ends that connection (as net/http's server does for a
// handler's), and the server goes on serving others.
func TestLeanPathPanicCostsOnlyItsConnection(t *testing.T) {
	in := startRawAnswers(t)
	_, addr, _, _ := startFront(t, panickyConvs{&leanConvs{addr: in.addr}}, nil)
	c, br := dialFront(t, addr)
	if _, err := io.WriteString(c, leanGet("/api/conversations/"+leanConflictID+"/events/1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readAnswer(br, "GET"); err == nil {
		t.Fatal("the panicking request got an answer; want its connection closed")
	}
	c2, br2 := dialFront(t, addr)
	uri := "/api/conversations/" + leanConvID + "/events/2"
	wantEcho(t, roundTrips(t, c2, br2, leanGet(uri), "GET")[0], "GET", uri)
}
