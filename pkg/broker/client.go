package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Client talks to a conversation's broker socket. It is what runs inside a
// container (ohctl git-credential, agents): it needs no DNS, no /etc
// files and no cgo. It reads the token file on every request, so a
// rotated token is picked up. Its methods are safe for concurrent use.
type Client struct {
	socket, tokenFile string
	hc                *http.Client
}

// clientHost is the Host header of requests to the broker; it is never
// resolved.
const clientHost = "ohd-broker"

// NewClient returns a Client for the socket and the token file; "" means
// DefaultSocket and DefaultTokenFile.
func NewClient(socket, tokenFile string) *Client {
	if socket == "" {
		socket = DefaultSocket
	}
	if tokenFile == "" {
		tokenFile = DefaultTokenFile
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &Client{
		socket:    socket,
		tokenFile: tokenFile,
		hc: &http.Client{
			// A redirect from an LLM provider is the caller's to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Transport: &http.Transport{
				// No Proxy: a container's HTTP_PROXY must not see the token.
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return d.DialContext(ctx, "unix", socket)
				},
				MaxIdleConnsPerHost: 8,
				// A chunk of a streamed body (a push's pack) goes out in
				// one write with its header and CRLF, not three.
				WriteBufferSize:       bodyWriteBuffer,
				IdleConnTimeout:       30 * time.Second,
				ResponseHeaderTimeout: 5 * time.Minute,
				DisableCompression:    true,
			},
		},
	}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Whoami is the answer of GET /v1/whoami.
type Whoami struct {
	ID     string `json:"id"`
	Epoch  uint64 `json:"epoch"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Grants Grants `json:"grants"`
}

// OAuthToken is the answer of GET /v1/oauth/{server}/token.
type OAuthToken struct {
	AccessToken string    `json:"access_token"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"` // zero: no expiry known
	TokenType   string    `json:"token_type"`
}

// Do sends req to the broker with the token and the X-OHD-Request header
// set; req's scheme and host are ignored. Use it for the LLM proxy:
// /v1/llm/{profile}/proxy/{path}.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	u := *req.URL
	u.Scheme, u.Host = "http", clientHost
	r.URL, r.Host = &u, clientHost
	r.Header.Set("Authorization", "Bearer "+tok)
	r.Header.Set("X-OHD-Request", "1")
	resp, err := c.hc.Do(r)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", c.socket, unwrapURLError(err))
	}
	return resp, nil
}

func (c *Client) token() (string, error) {
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("read broker token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// unwrapURLError drops *url.Error's "Get "http://ohd-broker/...":"
// prefix, which names a host that does not exist.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// call does a request and decodes a JSON answer into out, or returns the
// broker's error as an *APIError.
func (c *Client) call(ctx context.Context, method, path string, body io.Reader, out any) error {
	data, err := c.raw(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer clear(data)
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("broker %s: decode answer: %w", path, err)
	}
	return nil
}

func (c *Client) raw(ctx context.Context, method, path string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+clientHost+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("broker %s: read answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp.StatusCode, data)
	}
	return data, nil
}

func decodeError(status int, data []byte) error {
	var eb errorBody
	if json.Unmarshal(data, &eb) != nil || eb.Code == "" {
		return &APIError{Status: status, Code: "", Message: fmt.Sprintf("unexpected answer with status %d", status)}
	}
	return &APIError{Status: status, Code: eb.Code, Message: eb.Error}
}

// Whoami returns the conversation this client's token belongs to and its
// grants.
func (c *Client) Whoami(ctx context.Context) (Whoami, error) {
	var w Whoami
	err := c.call(ctx, http.MethodGet, "/v1/whoami", nil, &w)
	return w, err
}

// Secrets returns the names of the secrets granted.
func (c *Client) Secrets(ctx context.Context) ([]string, error) {
	var nb namesBody
	err := c.call(ctx, http.MethodGet, "/v1/secrets", nil, &nb)
	return nb.Names, err
}

// Secret returns the value of a granted secret; ErrNotGranted if it is not
// granted or does not exist.
func (c *Client) Secret(ctx context.Context, name string) ([]byte, error) {
	var sb secretBody
	if err := c.call(ctx, http.MethodGet, "/v1/secrets/"+url.PathEscape(name), nil, &sb); err != nil {
		return nil, err
	}
	if sb.Encoding == "base64" {
		return base64.StdEncoding.DecodeString(sb.Value)
	}
	return []byte(sb.Value), nil
}

// GitCredential sends a request in git's credential protocol for action
// (get, store or erase) and returns the broker's answer in that protocol.
func (c *Client) GitCredential(ctx context.Context, action string, request []byte) ([]byte, error) {
	return c.raw(ctx, http.MethodPost, "/v1/git-credential?action="+url.QueryEscape(action), bytes.NewReader(request))
}

// LLM returns a profile with its key, when the operator allowed
// disclosure; ErrNotGranted otherwise.
func (c *Client) LLM(ctx context.Context, profile string) (LLMProfile, error) {
	var lb llmBody
	if err := c.call(ctx, http.MethodGet, "/v1/llm/"+url.PathEscape(profile), nil, &lb); err != nil {
		return LLMProfile{}, err
	}
	return LLMProfile{Name: lb.Name, Model: lb.Model, BaseURL: lb.BaseURL, APIKey: []byte(lb.APIKey), AllowDisclosure: true}, nil
}

// OAuthToken returns a current access token for a granted OAuth server.
func (c *Client) OAuthToken(ctx context.Context, server string) (OAuthToken, error) {
	var t OAuthToken
	err := c.call(ctx, http.MethodGet, "/v1/oauth/"+url.PathEscape(server)+"/token", nil, &t)
	return t, err
}

// GitCredentialHelper runs git's credential-helper protocol for action
// (get, store or erase): it reads git's request from stdin, asks the
// broker, and writes the answer to stdout. The socket and the token file
// come from getenv(EnvSocket) and getenv(EnvTokenFile), defaulting to
// /run/ohd/broker.sock and /run/ohd/token; a nil getenv is os.Getenv.
//
// For a get of a host that is not granted it writes nothing to stdout and
// returns nil, as a helper that has no credential must (git then tries its
// next helper or gives up), and writes one line to stderr naming the host
// and the host command that grants it, so the refusal says so instead of
// git's "could not read Username". A username in the URL other than the
// configured one is refused the same way, with a line saying so. Any
// other failure is returned (ohctl prints it to stderr). Actions git may
// add later are ignored, as git asks of helpers. A nil stderr discards.
func GitCredentialHelper(ctx context.Context, action string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	switch action {
	case GitGet, GitStore, GitErase:
	default:
		return nil
	}
	req, err := io.ReadAll(io.LimitReader(stdin, defaultMaxBody+1))
	if err != nil {
		return fmt.Errorf("git-credential %s: read request: %w", action, err)
	}
	defer clear(req)
	if len(req) > defaultMaxBody {
		return fmt.Errorf("git-credential %s: request over %d bytes", action, defaultMaxBody)
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	c := NewClient(getenv(EnvSocket), getenv(EnvTokenFile))
	defer c.Close()
	answer, err := c.GitCredential(ctx, action, req)
	if err != nil {
		if errors.Is(err, ErrNotGranted) {
			if action == GitGet && stderr != nil {
				explainRefusal(stderr, err, req, getenv)
			}
			return nil
		}
		return fmt.Errorf("git-credential %s: %w", action, err)
	}
	defer clear(answer)
	if action != GitGet {
		return nil
	}
	if _, err := stdout.Write(answer); err != nil {
		return fmt.Errorf("git-credential %s: write answer: %w", action, err)
	}
	return nil
}

// explainRefusal writes the one stderr line of a refused get.
func explainRefusal(stderr io.Writer, err error, req []byte, getenv func(string) string) {
	name := "this host"
	if r, perr := ParseGitCredential(req); perr == nil {
		name = r.gitName()
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Message == refGitUsername.msg {
		fmt.Fprintf(stderr, "ohd: no credential for %s: %s\n", name, ae.Message)
		return
	}
	id := getenv("OHD_CONVERSATION_ID")
	if id == "" {
		id = "<conversation-id>"
	}
	host := name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		host = name[:i]
	}
	fmt.Fprintf(stderr, "ohd: %s is not granted to this conversation; on the host run: ohctl grant %s git %s (and ohctl git-host set %s --secret NAME if it has no credential yet)\n", name, id, host, host)
}
