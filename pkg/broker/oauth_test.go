package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/broker/brokertest"
)

// countingBackend counts OAuthServer calls, so a test knows when every
// caller is inside the broker.
type countingBackend struct {
	*brokertest.Backend
	oauthReads atomic.Int32
}

func (b *countingBackend) OAuthServer(ctx context.Context, name string) (broker.OAuthServer, error) {
	b.oauthReads.Add(1)
	return b.Backend.OAuthServer(ctx, name)
}

const (
	oldRefresh = "rt-" + marker + "-old"
	newRefresh = "rt-" + marker + "-new"
	newAccess  = "at-" + marker + "-new"
)

// TestOAuthRefreshOnce has 20 callers ask for an expired access token at
// once: the token endpoint sees one refresh, everybody gets the new token,
// the rotated refresh token is saved, and no answer holds a refresh token.
func TestOAuthRefreshOnce(t *testing.T) {
	const callers = 20
	var refreshes atomic.Int32
	release := make(chan struct{})
	tokenEndpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refreshes.Add(1)
		if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "refresh_token" ||
			r.PostForm.Get("refresh_token") != oldRefresh || r.PostForm.Get("client_id") != "ohd" ||
			r.PostForm.Get("client_secret") != "cs-"+marker {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		<-release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600,"refresh_token":%q}`, newAccess, newRefresh)
	}))
	t.Cleanup(tokenEndpoint.Close)

	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cb := &countingBackend{Backend: brokertest.New()}
	e := newEnv(t, func(o *broker.Options) {
		o.Backend = cb
		o.Now = func() time.Time { return now }
		o.Limits.OAuthInFlight = 2 * callers
	})
	e.be = cb.Backend
	ep := e.open(broker.Conversation{ID: "conv-o", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{OAuth: []string{"gh"}}})
	cb.SetOAuthServer(broker.OAuthServer{
		Name: "gh", TokenURL: tokenEndpoint.URL, ClientID: "ohd", ClientSecret: []byte("cs-" + marker),
		RefreshToken: []byte(oldRefresh), AccessToken: []byte("at-" + marker + "-old"),
		Expiry: now.Add(-time.Minute),
	})

	c := e.client(ep)
	var wg sync.WaitGroup
	results := make([]broker.OAuthToken, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			results[i], errs[i] = c.OAuthToken(context.Background(), "gh")
		})
	}
	// Every caller has read the expired token, and the refresh has
	// started (callers + 1 reads), before the endpoint answers.
	deadline := time.Now().Add(20 * time.Second)
	for cb.oauthReads.Load() < callers+1 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d OAuthServer reads happened", cb.oauthReads.Load(), callers+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		want := broker.OAuthToken{AccessToken: newAccess, ExpiresAt: now.Add(time.Hour), TokenType: "Bearer"}
		if got := results[i]; got.AccessToken != want.AccessToken || !got.ExpiresAt.Equal(want.ExpiresAt) || got.TokenType != want.TokenType {
			t.Errorf("caller %d got %+v, want %+v", i, got, want)
		}
	}
	if n := refreshes.Load(); n != 1 {
		t.Errorf("token endpoint saw %d refreshes, want 1", n)
	}
	if n := cb.OAuthSaves(); n != 1 {
		t.Errorf("SaveOAuthTokens called %d times, want 1", n)
	}
	srv, _ := cb.Backend.OAuthServer(context.Background(), "gh")
	if string(srv.RefreshToken) != newRefresh || string(srv.AccessToken) != newAccess {
		t.Errorf("saved tokens: refresh %q access %q", srv.RefreshToken, srv.AccessToken)
	}

	// The raw answer: exactly the documented fields, no refresh token.
	resp, body := e.request(ep.Socket, http.MethodGet, "/v1/oauth/gh/token", authed(e.token("conv-o", 1)), nil)
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil || resp.StatusCode != 200 {
		t.Fatalf("token answer %d %s", resp.StatusCode, body)
	}
	if len(fields) != 3 || fields["access_token"] != newAccess || fields["token_type"] != "Bearer" || fields["expires_at"] != "2030-01-02T04:04:05Z" {
		t.Errorf("token answer = %s", body)
	}
	if strings.Contains(string(body), "rt-") {
		t.Errorf("token answer holds a refresh token: %s", body)
	}
	if n := refreshes.Load(); n != 1 {
		t.Errorf("a fresh token was refreshed again (%d refreshes)", n)
	}
}

func TestOAuthFailures(t *testing.T) {
	tokenEndpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		// A hostile endpoint echoing what it got.
		_ = r.ParseForm()
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":%q}`, r.PostForm.Encode())
	}))
	t.Cleanup(tokenEndpoint.Close)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newEnv(t, func(o *broker.Options) { o.Now = func() time.Time { return now } })
	ep := e.open(broker.Conversation{ID: "conv-o", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1,
		Grants: broker.Grants{OAuth: []string{"rejecting", "norefresh", "noexpiry", "missing"}}})
	e.be.SetOAuthServer(broker.OAuthServer{Name: "rejecting", TokenURL: tokenEndpoint.URL, RefreshToken: []byte("rt-" + marker), Expiry: now.Add(-time.Hour)})
	e.be.SetOAuthServer(broker.OAuthServer{Name: "norefresh", TokenURL: tokenEndpoint.URL, AccessToken: []byte("at-" + marker), Expiry: now.Add(30 * time.Second)})
	e.be.SetOAuthServer(broker.OAuthServer{Name: "noexpiry", TokenURL: tokenEndpoint.URL, AccessToken: []byte("at-" + marker + "-forever")})
	e.be.SetOAuthServer(broker.OAuthServer{Name: "ungranted", TokenURL: tokenEndpoint.URL, AccessToken: []byte("at-" + marker)})
	c := e.client(ep)
	ctx := context.Background()
	for _, tc := range []struct {
		server string
		status int
		code   string
	}{
		{"rejecting", 502, "bad_gateway"},
		{"missing", 403, "not_granted"},
		{"ungranted", 403, "not_granted"},
	} {
		_, err := c.OAuthToken(ctx, tc.server)
		var ae *broker.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
			t.Errorf("OAuthToken(%q) error = %v, want %d %s", tc.server, err, tc.status, tc.code)
			continue
		}
		e.watch(ae.Error())
	}
	if _, err := c.OAuthToken(ctx, "missing"); !errors.Is(err, broker.ErrNotGranted) {
		t.Errorf("OAuthToken(missing) = %v, want ErrNotGranted", err)
	}
	// No refresh token, but the stored one is still valid: it is answered.
	if got, err := c.OAuthToken(ctx, "norefresh"); err != nil || got.AccessToken != "at-"+marker {
		t.Errorf("OAuthToken(norefresh) = %+v, %v; want the stored token, valid another 30 s", got, err)
	}
	got, err := c.OAuthToken(ctx, "noexpiry")
	if err != nil || got.AccessToken != "at-"+marker+"-forever" || !got.ExpiresAt.IsZero() {
		t.Errorf("OAuthToken(noexpiry) = %+v, %v", got, err)
	}
}

// TestOAuthKeepsAValidToken: the refresh is due (the token expires within
// the skew) but the token endpoint fails; the stored token is still valid
// for 30 s, so the caller gets it, and the failed refresh is logged. Once
// the token has expired, the failure is the caller's: 502 bad_gateway.
func TestOAuthKeepsAValidToken(t *testing.T) {
	var calls atomic.Int32
	tokenEndpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, `{"error":"temporarily_unavailable"}`, http.StatusServiceUnavailable)
	}))
	t.Cleanup(tokenEndpoint.Close)
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, func(o *broker.Options) { o.Now = clock })
	ep := e.open(broker.Conversation{ID: "conv-o", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1, Grants: broker.Grants{OAuth: []string{"gh"}}})
	e.be.SetOAuthServer(broker.OAuthServer{Name: "gh", TokenURL: tokenEndpoint.URL, RefreshToken: []byte("rt-" + marker),
		AccessToken: []byte("at-" + marker), Expiry: now.Add(30 * time.Second)})
	c := e.client(ep)
	got, err := c.OAuthToken(context.Background(), "gh")
	if err != nil || got.AccessToken != "at-"+marker || !got.ExpiresAt.Equal(now.Add(30*time.Second)) {
		t.Fatalf("OAuthToken with a failing refresh and a valid token = %+v, %v; want the stored token", got, err)
	}
	if calls.Load() != 1 {
		t.Errorf("token endpoint called %d times, want 1 (the refresh was due)", calls.Load())
	}
	if rec := e.audit(e.auditCount()); !rec.Allowed || rec.Reason != "refresh_failed_token_valid" {
		t.Errorf("audit = %+v, want allowed with reason refresh_failed_token_valid", rec)
	}
	if !strings.Contains(e.log.String(), "oauth refresh failed") || !strings.Contains(e.log.String(), "status 503 (temporarily_unavailable)") {
		t.Errorf("the failed refresh is not logged:\n%s", e.log.String())
	}
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	_, err = c.OAuthToken(context.Background(), "gh")
	var ae *broker.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || ae.Code != broker.CodeBadGateway {
		t.Errorf("OAuthToken after expiry with a failing refresh = %v, want 502 bad_gateway", err)
	}
}
