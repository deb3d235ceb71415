package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/store"
)

// ErrDaemonUnreachable is returned when nothing answers on the socket.
var ErrDaemonUnreachable = errors.New("ohd is not reachable")

// Client talks to a daemon over its control socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	return &Client{socket: path, hc: &http.Client{Transport: tr}}
}

// do sends a request and decodes a JSON answer into out (if non-nil).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: bad answer from ohd: %w", method, path, err)
	}
	return nil
}

// send sends a request and returns the response of a 2xx answer; other
// answers become *Error.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(v)
	case io.Reader:
		body = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ohd"+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if isUnreachable(err) {
			return nil, fmt.Errorf("%w at %s: start it with `ohd serve`, or point ohctl at its socket with --socket or OHD_CONTROL_SOCKET", ErrDaemonUnreachable, c.socket)
		}
		if errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("connect to %s: permission denied: the control socket belongs to the daemon's user; run ohctl as that user or as root", c.socket)
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var e Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, &e) != nil || e.Message == "" {
		e = Error{Message: fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b))), Code: CodeInternal}
	}
	return nil, &e
}

func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

func esc(s string) string { return url.PathEscape(s) }

// Version returns the daemon's version.
func (c *Client) Version(ctx context.Context) (Version, error) {
	var v Version
	return v, c.do(ctx, "GET", "/v1/version", nil, &v)
}

// Pulls returns the image pulls in progress, oldest first.
func (c *Client) Pulls(ctx context.Context) ([]Pull, error) {
	var out []Pull
	return out, c.do(ctx, "GET", "/v1/pulls", nil, &out)
}

// List returns every conversation record (deleted ones too).
func (c *Client) List(ctx context.Context) ([]store.Conversation, error) {
	var out []store.Conversation
	return out, c.do(ctx, "GET", "/v1/conversations", nil, &out)
}

// Create creates a conversation.
func (c *Client) Create(ctx context.Context, r CreateRequest) (store.Conversation, error) {
	var out store.Conversation
	return out, c.do(ctx, "POST", "/v1/conversations", r, &out)
}

// Get returns one conversation.
func (c *Client) Get(ctx context.Context, id string) (store.Conversation, error) {
	var out store.Conversation
	return out, c.do(ctx, "GET", "/v1/conversations/"+esc(id), nil, &out)
}

// Remove ends a conversation; discard also deletes its branch and snapshot.
func (c *Client) Remove(ctx context.Context, id string, discard bool) (store.Conversation, error) {
	var out store.Conversation
	q := ""
	if discard {
		q = "?discard=true"
	}
	return out, c.do(ctx, "DELETE", "/v1/conversations/"+esc(id)+q, nil, &out)
}

// GrantWith adds a grant with its options (GrantRequest's Push and
// GitRelay).
func (c *Client) GrantWith(ctx context.Context, id string, req GrantRequest) (store.Conversation, error) {
	var out store.Conversation
	return out, c.do(ctx, "POST", "/v1/conversations/"+esc(id)+"/grants", req, &out)
}

// Revoke removes a grant from a conversation.
func (c *Client) Revoke(ctx context.Context, id, kind, name string) (store.Conversation, error) {
	var out store.Conversation
	return out, c.do(ctx, "DELETE", "/v1/conversations/"+esc(id)+"/grants/"+esc(kind)+"/"+esc(name), nil, &out)
}

// RotateToken bumps a conversation's broker epoch and rewrites its token.
func (c *Client) RotateToken(ctx context.Context, id string) (store.Conversation, error) {
	var out store.Conversation
	return out, c.do(ctx, "POST", "/v1/conversations/"+esc(id)+"/token/rotate", nil, &out)
}

// Logs streams a conversation container's output to w.
func (c *Client) Logs(ctx context.Context, id string, follow bool, w io.Writer) error {
	q := ""
	if follow {
		q = "?follow=true"
	}
	resp, err := c.send(ctx, "GET", "/v1/conversations/"+esc(id)+"/logs"+q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Exec runs r.Cmd in a conversation's container, copying stdin (if not
// nil) to its standard input and its output to stdout and stderr, and
// returns its exit code.
func (c *Client) Exec(ctx context.Context, id string, r ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	r.Stdin = stdin != nil
	head, err := json.Marshal(r)
	if err != nil {
		return -1, err
	}
	var body io.Reader = bytes.NewReader(append(head, '\n'))
	if stdin != nil {
		body = io.MultiReader(body, stdin)
	}
	resp, err := c.send(ctx, "POST", "/v1/conversations/"+esc(id)+"/exec", body)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	return readExecFrames(resp.Body, stdout, stderr)
}

// ExecTTY runs r.Cmd on a pseudo-terminal in a conversation's container
// (ohctl exec -t): what is read from stdin is typed at it, each size from
// sizes becomes its window size, and its output goes to stdout. It returns
// the command's exit code.
//
// A Read of stdin that blocks when the command exits is not waited for
// (a terminal's never ends): ExecTTY returns, and that Read's bytes go
// nowhere. Callers that go on reading stdin pass a reader they can stop.
func (c *Client) ExecTTY(ctx context.Context, id string, r ExecRequest, stdin io.Reader, sizes <-chan TermSize, stdout io.Writer) (int, error) {
	r.Stdin, r.TTY = true, true
	head, err := json.Marshal(r)
	if err != nil {
		return -1, err
	}
	// Each ExecInput line is one Write to the pipe, so lines from the two
	// writers below never interleave.
	pr, pw := io.Pipe()
	send := func(m ExecInput) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = pw.Write(append(b, '\n'))
		return err
	}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				if send(ExecInput{Data: buf[:n]}) != nil {
					return
				}
			}
			if err != nil {
				// The terminal is gone: end the input, as a hang-up would.
				_ = pw.Close()
				return
			}
		}
	}()
	done := make(chan struct{})
	resized := make(chan struct{})
	go func() {
		defer close(resized)
		for {
			select {
			case <-done:
				return
			case sz, ok := <-sizes:
				if !ok {
					return
				}
				if send(ExecInput{Size: &sz}) != nil {
					return
				}
			}
		}
	}()
	defer func() {
		close(done)
		// Ends the request body, so the daemon's read of it ends, and
		// unblocks a send that the transport no longer reads.
		_ = pw.Close()
		<-resized
	}()
	resp, err := c.send(ctx, "POST", "/v1/conversations/"+esc(id)+"/exec", io.MultiReader(bytes.NewReader(append(head, '\n')), pr))
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	return readExecFrames(resp.Body, stdout, io.Discard)
}

// readExecFrames copies an exec answer's output to stdout and stderr and
// returns the exit code it ends with.
func readExecFrames(body io.Reader, stdout, stderr io.Writer) (int, error) {
	dec := json.NewDecoder(body)
	for {
		var f ExecFrame
		if err := dec.Decode(&f); err != nil {
			return -1, fmt.Errorf("exec: the stream ended without an exit code: %w", err)
		}
		switch {
		case f.Error != "":
			return -1, errors.New(f.Error)
		case f.ExitCode != nil:
			return *f.ExitCode, nil
		case f.Stream == "stderr":
			_, _ = stderr.Write(f.Data)
		default:
			_, _ = stdout.Write(f.Data)
		}
	}
}

// Restore recreates an ended conversation's work in a new worktree.
func (c *Client) Restore(ctx context.Context, id string, r RestoreRequest) (RestoreResult, error) {
	var out RestoreResult
	return out, c.do(ctx, "POST", "/v1/conversations/"+esc(id)+"/restore", r, &out)
}

// Prune cleans up (or reports, with DryRun).
func (c *Client) Prune(ctx context.Context, r PruneRequest) (PruneReport, error) {
	var out PruneReport
	return out, c.do(ctx, "POST", "/v1/prune", r, &out)
}

// Doctor runs the health checks, of one conversation if id is set.
func (c *Client) Doctor(ctx context.Context, id string, repair bool) (DoctorReport, error) {
	q := url.Values{}
	if id != "" {
		q.Set("id", id)
	}
	if repair {
		q.Set("repair", "true")
	}
	method := "GET"
	if repair {
		method = "POST"
	}
	var out DoctorReport
	return out, c.do(ctx, method, "/v1/doctor?"+q.Encode(), nil, &out)
}

// DoctorRepo examines the repository at path (ohctl doctor --repo).
func (c *Client) DoctorRepo(ctx context.Context, path string, repair bool) (DoctorReport, error) {
	q := url.Values{"repo": {path}}
	method := "GET"
	if repair {
		q.Set("repair", "true")
		method = "POST"
	}
	var out DoctorReport
	return out, c.do(ctx, method, "/v1/doctor?"+q.Encode(), nil, &out)
}

// SetSecret stores a secret value.
func (c *Client) SetSecret(ctx context.Context, name string, value []byte) error {
	return c.do(ctx, "PUT", "/v1/secrets/"+esc(name), value, nil)
}

// Secrets lists secrets (names and sizes, never values).
func (c *Client) Secrets(ctx context.Context) ([]store.SecretInfo, error) {
	var out []store.SecretInfo
	return out, c.do(ctx, "GET", "/v1/secrets", nil, &out)
}

// RemoveSecret deletes a secret.
func (c *Client) RemoveSecret(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/secrets/"+esc(name), nil, nil)
}

// PutGitCredential configures the credential answered for a git host.
func (c *Client) PutGitCredential(ctx context.Context, g store.GitCredential) error {
	return c.do(ctx, "PUT", "/v1/git-credentials/"+esc(g.Host), g, nil)
}

// GitCredentials lists the configured git credentials.
func (c *Client) GitCredentials(ctx context.Context) ([]store.GitCredential, error) {
	var out []store.GitCredential
	return out, c.do(ctx, "GET", "/v1/git-credentials", nil, &out)
}

// RemoveGitCredential deletes a git host's credential configuration.
func (c *Client) RemoveGitCredential(ctx context.Context, host string) error {
	return c.do(ctx, "DELETE", "/v1/git-credentials/"+esc(host), nil, nil)
}

// PutLLMProfile creates or replaces an LLM profile.
func (c *Client) PutLLMProfile(ctx context.Context, p store.LLMProfile) error {
	return c.do(ctx, "PUT", "/v1/llm-profiles/"+esc(p.Name), p, nil)
}

// LLMProfiles lists LLM profiles.
func (c *Client) LLMProfiles(ctx context.Context) ([]store.LLMProfile, error) {
	var out []store.LLMProfile
	return out, c.do(ctx, "GET", "/v1/llm-profiles", nil, &out)
}

// RemoveLLMProfile deletes an LLM profile.
func (c *Client) RemoveLLMProfile(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/llm-profiles/"+esc(name), nil, nil)
}

// OAuthServerRequest configures an OAuth server; RefreshToken, when set,
// replaces the stored refresh token.
type OAuthServerRequest struct {
	store.OAuthServer
	RefreshToken []byte `json:"refresh_token,omitempty"`
}

// PutOAuthServer creates or replaces an OAuth server.
func (c *Client) PutOAuthServer(ctx context.Context, r OAuthServerRequest) error {
	return c.do(ctx, "PUT", "/v1/oauth-servers/"+esc(r.Name), r, nil)
}

// OAuthServers lists OAuth servers (no tokens).
func (c *Client) OAuthServers(ctx context.Context) ([]store.OAuthServer, error) {
	var out []store.OAuthServer
	return out, c.do(ctx, "GET", "/v1/oauth-servers", nil, &out)
}

// RemoveOAuthServer deletes an OAuth server and its tokens.
func (c *Client) RemoveOAuthServer(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/oauth-servers/"+esc(name), nil, nil)
}

// Audit returns audit records, of one conversation if id is set, the
// newest limit of them if limit > 0.
func (c *Client) Audit(ctx context.Context, id string, limit int) ([]store.AuditRecord, error) {
	q := url.Values{}
	if id != "" {
		q.Set("conversation", id)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var out []store.AuditRecord
	return out, c.do(ctx, "GET", "/v1/audit?"+q.Encode(), nil, &out)
}
