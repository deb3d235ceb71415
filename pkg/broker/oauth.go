package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

const (
	// refreshSkew: an access token that expires within this is refreshed
	// before it is handed out.
	refreshSkew = time.Minute
	// refreshTimeout bounds one refresh at the token endpoint.
	refreshTimeout = 30 * time.Second
	// maxTokenResponse bounds a token endpoint's answer.
	maxTokenResponse = 1 << 20
)

type tokenBody struct {
	AccessToken string    `json:"access_token"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	TokenType   string    `json:"token_type"`
}

// oauthToken serves GET /v1/oauth/{server}/token: the stored access token
// if it is good for at least another minute, else one refreshed on the
// host with the stored refresh token. The refresh token never leaves.
func (c *conversation) oauthToken(w http.ResponseWriter, r *http.Request, rec *AuditRecord, conv *Conversation, name string) {
	if !granted(conv.Grants.OAuth, name) {
		c.refuse(w, rec, notGranted(KindOAuth))
		return
	}
	srv, err := c.b.opts.Backend.OAuthServer(r.Context(), name)
	if err != nil {
		c.backendFailed(w, rec, err, KindOAuth, name)
		return
	}
	tok := oauthResult{access: srv.AccessToken, expiry: srv.Expiry, tokenType: "Bearer"}
	if !c.b.fresh(srv) {
		tok, err = c.b.refresh(r.Context(), name)
		if err != nil {
			switch {
			case errors.Is(err, ErrNotFound):
				c.backendFailed(w, rec, err, KindOAuth, name)
			case r.Context().Err() != nil:
				f := *refOAuthFailed
				f.reason = "client_gone"
				c.refuse(w, rec, &f)
			case len(srv.AccessToken) > 0 && !srv.Expiry.IsZero() && c.b.now().Before(srv.Expiry):
				// The refresh (due a minute early) failed or is not
				// possible, but the token ohd holds is still valid:
				// answer it rather than fail a caller who could work
				// until its expiry (TestOAuthKeepsAValidToken).
				c.b.log.Warn("broker: oauth refresh failed; answering the stored token, still valid", "server", name, "expires", srv.Expiry, "err", err)
				tok = oauthResult{access: srv.AccessToken, expiry: srv.Expiry, tokenType: "Bearer"}
				rec.Reason = "refresh_failed_token_valid"
				c.ok(w, rec, jsonBody(tokenBody{AccessToken: string(tok.access), ExpiresAt: tok.expiry, TokenType: tok.tokenType}))
				return
			case errors.Is(err, errNoRefreshToken):
				c.refuse(w, rec, refNoRefresh)
			default:
				c.b.log.Warn("broker: oauth refresh failed", "server", name, "err", err)
				c.refuse(w, rec, refOAuthFailed)
			}
			return
		}
	}
	c.ok(w, rec, jsonBody(tokenBody{AccessToken: string(tok.access), ExpiresAt: tok.expiry, TokenType: tok.tokenType}))
}

func (b *Broker) fresh(s OAuthServer) bool {
	return len(s.AccessToken) > 0 && (s.Expiry.IsZero() || s.Expiry.Sub(b.now()) > refreshSkew)
}

type oauthResult struct {
	access    []byte
	expiry    time.Time
	tokenType string
}

var errNoRefreshToken = errors.New("no refresh token stored")

// flights makes concurrent refreshes of one server share one request to
// the token endpoint (a rotating refresh token can be used only once).
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	res  oauthResult
	err  error
}

// refresh returns a fresh token for server name, joining a refresh in
// progress if there is one. The refresh runs on its own goroutine, owned
// by the Broker, so a caller that goes away does not cancel it for the
// others.
func (b *Broker) refresh(ctx context.Context, name string) (oauthResult, error) {
	b.oauth.mu.Lock()
	f, ok := b.oauth.m[name]
	if !ok {
		if b.oauth.m == nil {
			b.oauth.m = make(map[string]*flight)
		}
		f = &flight{done: make(chan struct{})}
		b.oauth.m[name] = f
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			f.res, f.err = b.doRefresh(name)
			b.oauth.mu.Lock()
			delete(b.oauth.m, name)
			b.oauth.mu.Unlock()
			close(f.done)
		}()
	}
	b.oauth.mu.Unlock()
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return oauthResult{}, ctx.Err()
	}
}

func (b *Broker) doRefresh(name string) (oauthResult, error) {
	ctx, cancel := context.WithTimeout(b.ctx, refreshTimeout)
	defer cancel()
	// Read again inside the flight: a refresh that just finished saved a
	// fresh token, and using the old refresh token again would fail where
	// the server rotates them.
	srv, err := b.opts.Backend.OAuthServer(ctx, name)
	if err != nil {
		return oauthResult{}, err
	}
	if b.fresh(srv) {
		return oauthResult{access: srv.AccessToken, expiry: srv.Expiry, tokenType: "Bearer"}, nil
	}
	if len(srv.RefreshToken) == 0 {
		return oauthResult{}, errNoRefreshToken
	}
	form := url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {string(srv.RefreshToken)},
	}
	if srv.ClientID != "" {
		form.Set("client_id", srv.ClientID)
	}
	if len(srv.ClientSecret) > 0 {
		form.Set("client_secret", string(srv.ClientSecret))
	}
	enc := []byte(form.Encode())
	defer clear(enc)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.TokenURL, bytes.NewReader(enc))
	if err != nil {
		return oauthResult{}, fmt.Errorf("token url of %s: invalid", name)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	started := b.now()
	resp, err := b.hc.Do(req)
	if err != nil {
		return oauthResult{}, fmt.Errorf("token endpoint of %s: %w", name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	defer clear(data)
	if err != nil {
		return oauthResult{}, fmt.Errorf("token endpoint of %s: read answer: %w", name, err)
	}
	var tr struct {
		AccessToken  string          `json:"access_token"`
		TokenType    string          `json:"token_type"`
		RefreshToken string          `json:"refresh_token"`
		ExpiresIn    json.RawMessage `json:"expires_in"`
		Error        string          `json:"error"`
	}
	jerr := json.Unmarshal(data, &tr)
	if resp.StatusCode != http.StatusOK {
		// The error code (e.g. invalid_grant) is a fixed word, safe to
		// log; nothing else of the answer is.
		code := ""
		if jerr == nil && isWord(tr.Error) {
			code = " (" + tr.Error + ")"
		}
		return oauthResult{}, fmt.Errorf("token endpoint of %s: status %d%s", name, resp.StatusCode, code)
	}
	if jerr != nil || tr.AccessToken == "" {
		return oauthResult{}, fmt.Errorf("token endpoint of %s: answer without an access token", name)
	}
	res := oauthResult{access: []byte(tr.AccessToken), tokenType: tr.TokenType}
	if res.tokenType == "" {
		res.tokenType = "Bearer"
	}
	if secs, ok := parseExpiresIn(tr.ExpiresIn); ok {
		res.expiry = started.Add(time.Duration(secs) * time.Second)
	}
	refresh := srv.RefreshToken
	if tr.RefreshToken != "" {
		refresh = []byte(tr.RefreshToken)
	}
	if err := b.opts.Backend.SaveOAuthTokens(ctx, name, res.access, refresh, res.expiry); err != nil {
		// The access token is good; losing a rotated refresh token is
		// not, so say so loudly.
		b.log.Error("broker: saving refreshed oauth tokens failed; the next refresh may need a new authorization", "server", name, "err", err)
	}
	return res, nil
}

// parseExpiresIn accepts a JSON number or a string of digits (both are
// seen in the wild).
func parseExpiresIn(raw json.RawMessage) (int64, bool) {
	s := string(bytes.Trim(raw, `"`))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > 10*365*24*3600 {
		return 0, false
	}
	return n, true
}

func isWord(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
