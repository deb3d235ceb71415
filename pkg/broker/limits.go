package broker

import (
	"context"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ohd-dev/ohd/pkg/peercred"
)

// limiter is one conversation's budget: requests in flight per kind,
// open connections, and a token bucket. All are checked without waiting;
// the mutex guards two numbers and is never held across I/O.
type limiter struct {
	maxInFlight [numBudgets]int32 // <0: unlimited
	inFlight    [numBudgets]atomic.Int32

	maxConns int32 // <0: unlimited
	conns    atomic.Int32

	rate  float64 // tokens per second; <0: unlimited
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// The in-flight budgets: one per kind, and one for routes of no kind.
const (
	budgetOther = iota
	budgetGit
	budgetSecret
	budgetLLM
	budgetOAuth
	budgetMCP
	budgetNet
	numBudgets
)

// routeBudgets maps a route to its budget.
var routeBudgets = [...]int{
	routeSecret:      budgetSecret,
	routeGit:         budgetGit,
	routeLLM:         budgetLLM,
	routeLLMProxy:    budgetLLM,
	routeOAuth:       budgetOAuth,
	routeMCPProxy:    budgetMCP,
	routeGitProxy:    budgetGit,
	routeEgress:      budgetNet,
	routeEgressProxy: budgetNet,
}

func clamp32(n int) int32 { return int32(min(n, math.MaxInt32)) }

func (l *limiter) init(lim Limits) {
	l.maxInFlight = [numBudgets]int32{
		budgetOther: clamp32(lim.MaxInFlight), budgetGit: clamp32(lim.GitInFlight),
		budgetSecret: clamp32(lim.SecretInFlight), budgetLLM: clamp32(lim.LLMInFlight),
		budgetOAuth: clamp32(lim.OAuthInFlight), budgetMCP: clamp32(lim.MCPInFlight),
		budgetNet: clamp32(lim.EgressConns),
	}
	l.maxConns = clamp32(lim.MaxConns)
	l.rate = lim.Rate
	l.burst = float64(lim.Burst)
	l.tokens = l.burst
}

// acquire takes an in-flight slot of route rt's budget; release gives it
// back.
func (l *limiter) acquire(rt routeID) bool {
	b := routeBudgets[rt]
	if l.maxInFlight[b] < 0 {
		return true
	}
	if l.inFlight[b].Add(1) > l.maxInFlight[b] {
		l.inFlight[b].Add(-1)
		return false
	}
	return true
}

func (l *limiter) release(rt routeID) {
	b := routeBudgets[rt]
	if l.maxInFlight[b] >= 0 {
		l.inFlight[b].Add(-1)
	}
}

// connOpened counts a new connection and reports whether it is within
// the cap; connClosed uncounts it (every opened one, refused or not).
func (l *limiter) connOpened() bool {
	n := l.conns.Add(1)
	return l.maxConns < 0 || n <= l.maxConns
}

func (l *limiter) connClosed() { l.conns.Add(-1) }

// allow takes a token at now. When the bucket is empty it returns false
// and the whole seconds until a token is back (at least 1), for
// Retry-After.
func (l *limiter) allow(now time.Time) (retryAfter int, ok bool) {
	if l.rate < 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		if d := now.Sub(l.last); d > 0 {
			l.tokens = min(l.burst, l.tokens+d.Seconds()*l.rate)
		}
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		return 0, true
	}
	wait := math.Ceil((1 - l.tokens) / l.rate)
	if wait < 1 || math.IsNaN(wait) {
		wait = 1
	}
	return int(min(wait, 3600)), false
}

// connTooMany is the answer written to a connection over MaxConns before
// it is closed: a client sees a 429 like any other budget's, not a reset.
var connTooMany = func() []byte {
	body := appendError(nil, "too many connections open for this conversation", CodeRateLimited)
	return []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}()

// connState counts the conversation's connections (http.Server.ConnState)
// and refuses one over the cap: it is answered, audited and closed before
// the server reads from it.
func (c *conversation) connState(conn net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		if c.lim.connOpened() {
			return
		}
		rec := AuditRecord{Time: c.b.now(), Conversation: c.id, PeerPID: -1, PeerUID: -1,
			Status: http.StatusTooManyRequests, Code: CodeRateLimited, Reason: "connections"}
		if cred, ok := peercred.FromContext(peercred.ConnContext(context.Background(), conn)); ok {
			rec.PeerPID, rec.PeerUID = cred.PID, cred.UID
		}
		c.b.opts.Backend.Audit(rec)
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write(connTooMany)
		_ = conn.Close()
	case http.StateHijacked, http.StateClosed:
		c.lim.connClosed()
	}
}
